import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { requestFingerprint } from '../../../src/admission/idempotency.js';
import { canonicalJson } from '../../../src/util/canonical-json.js';

/** What the fingerprint always was; records stored under it must keep matching. */
const storedFormula = (workflow: string, body: object) => createHash('sha256').update(canonicalJson({ workflow, body })).digest('hex');

describe('requestFingerprint', () => {
  const bodies = [
    { workflow: 'support-reply', input: { message: 'where is order 123?' } },
    { workflow: 'report-digest', input: [1, 'two', { three: null }], class: 'batch', deadlineMs: 60_000 },
    { workflow: 'support-reply', input: 'plain text with "quotes" and \u0000 and ☕', deadlineMs: 5_000 },
    { workflow: 'support-reply', input: null, class: 'interactive' },
  ];

  it('is the hash of the canonical request, with the input spliced in from its serialized text', () => {
    for (const body of bodies) {
      expect(requestFingerprint(body.workflow, body, canonicalJson(body.input))).toBe(storedFormula(body.workflow, body));
    }
  });

  it('ignores key order, and tells different inputs, classes and deadlines apart', () => {
    const a = requestFingerprint('wf', { workflow: 'wf', class: 'batch' }, canonicalJson({ x: 1, y: [2, { b: 1, a: 0 }] }));
    const b = requestFingerprint('wf', { class: 'batch', workflow: 'wf' }, canonicalJson({ y: [2, { a: 0, b: 1 }], x: 1 }));
    expect(a).toBe(b);
    const others = [
      requestFingerprint('wf', { workflow: 'wf', class: 'batch' }, canonicalJson({ x: 2, y: [2, { a: 0, b: 1 }] })),
      requestFingerprint('wf', { workflow: 'wf', class: 'interactive' }, canonicalJson({ x: 1, y: [2, { a: 0, b: 1 }] })),
      requestFingerprint('wf', { workflow: 'wf', class: 'batch', deadlineMs: 1_000 }, canonicalJson({ x: 1, y: [2, { a: 0, b: 1 }] })),
    ];
    expect(new Set([a, ...others]).size).toBe(4);
  });

  it('an input that looks like the slot marker is just input', () => {
    const body = { workflow: 'wf', input: '\u0000sluice:input\u0000' };
    expect(requestFingerprint('wf', body, canonicalJson(body.input))).toBe(storedFormula('wf', body));
  });
});
