import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import type { RunSubmission } from '../../../src/events/schemas.js';
import { requestFingerprint } from '../../../src/admission/idempotency.js';
import { MAX_DECISIONS, answerStatus, answerStatusEvent, checkSubmission, endedDeferral, recordWrittenAt, reofferAt, staleRecord, type IngressAnswer } from '../../../src/ingress/ingress-policy.js';
import { heldSequence } from '../../../src/runs/status-sequence.js';
import { MAX_REQUEST_ID } from '../../../src/client/types.js';
import { toRunSubmission, type SubmitRequest } from '../../../src/producers/submission.js';

const config = loadConfig({ env: {} });

const submission = (over: Partial<RunSubmission> = {}): RunSubmission => ({
  requestId: 'req-1',
  idempotencyKey: 'order-42',
  tenantId: 'tenant-a',
  workflow: 'support-reply',
  input: '{"orderId":"42","message":"where?"}',
  class: null,
  deadlineMs: null,
  ...over,
});

describe('checkSubmission: a RunSubmission as an admission request', () => {
  it('maps the fields as POST /v1/runs would, with the workflow default class and deadline', () => {
    const check = checkSubmission(submission(), 'tenant-a', config);
    expect(check.ok).toBe(true);
    if (!check.ok) return;
    const r = check.request;
    expect(r).toMatchObject({ tenantId: 'tenant-a', requestId: 'req-1', idempotencyKey: 'order-42', workflowName: 'support-reply', runClass: 'interactive', budgetMs: config.api.deadlineMs.defaultInteractive });
    expect(r.inputJson).toBe('{"message":"where?","orderId":"42"}');
    // The same fingerprint as the same body sent over HTTP: class and deadline only when given.
    expect(r.fingerprint).toBe(requestFingerprint('support-reply', { workflow: 'support-reply', input: { orderId: '42', message: 'where?' } }, r.inputJson));
  });

  it('takes a given class and deadline, and they change the fingerprint', () => {
    const plain = checkSubmission(submission(), 'tenant-a', config);
    const given = checkSubmission(submission({ class: 'batch', deadlineMs: 60_000 }), 'tenant-a', config);
    expect(given.ok && given.request.runClass).toBe('batch');
    expect(given.ok && given.request.budgetMs).toBe(60_000);
    expect(plain.ok && given.ok && plain.request.fingerprint !== given.request.fingerprint).toBe(true);
  });

  it('keeps the fingerprint whatever the key order of the input or the request id', () => {
    const a = checkSubmission(submission(), 'tenant-a', config);
    const b = checkSubmission(submission({ requestId: 'req-2', input: '{"message":"where?","orderId":"42"}' }), 'tenant-a', config);
    expect(a.ok && b.ok && a.request.fingerprint === b.request.fingerprint).toBe(true);
  });

  it.each([
    ['a tenant other than the record key', submission({ tenantId: 'tenant-b' }), 'invalid_request', /record key/],
    ['an unknown workflow', submission({ workflow: 'nope' }), 'unknown_workflow', /unknown workflow/],
    ['a bad idempotency key', submission({ idempotencyKey: 'has space' }), 'invalid_request', /idempotencyKey/],
    ['an empty request id', submission({ requestId: '' }), 'invalid_request', /requestId/],
    ['input that is not JSON', submission({ input: '{' }), 'invalid_request', /not JSON/],
    ['input nested too deep', submission({ input: '['.repeat(100) + ']'.repeat(100) }), 'invalid_request', /deeper than 64/],
    ['a deadline under the minimum', submission({ deadlineMs: 5 }), 'invalid_request', /deadlineMs must be at least/],
  ])('refuses %s', (_what, sub, reason, message) => {
    const check = checkSubmission(sub, 'tenant-a', config);
    expect(check.ok).toBe(false);
    if (check.ok) return;
    expect(check.reason).toBe(reason);
    expect(check.message).toMatch(message);
  });

  it('bounds request ids and keys by the rule SluiceProducer checks before sending, in the same words', () => {
    for (const [field, over] of [
      ['requestId', { requestId: 'r'.repeat(MAX_REQUEST_ID + 1) }],
      ['idempotencyKey', { idempotencyKey: 'k'.repeat(256) }],
    ] as const) {
      const ingress = checkSubmission(submission(over), 'tenant-a', config);
      const request: SubmitRequest = { workflow: 'support-reply', input: {}, idempotencyKey: 'order-42', requestId: 'req-1' };
      const producer = toRunSubmission('tenant-a', { ...request, ...over }, () => 'unused');
      expect(producer.ok || ingress.ok).toBe(false);
      if (producer.ok || ingress.ok) continue;
      expect(producer.field).toBe(field);
      expect(ingress.message).toBe(`${field} ${producer.message}`);
    }
    expect(checkSubmission(submission({ requestId: 'r'.repeat(MAX_REQUEST_ID) }), 'tenant-a', config).ok).toBe(true);
  });

  it('refuses a record key naming no configured tenant', () => {
    const check = checkSubmission(submission({ tenantId: 'ghost' }), 'ghost', config);
    expect(check).toMatchObject({ ok: false, reason: 'invalid_request' });
  });
});

describe('reofferAt: the deferral schedule', () => {
  const T0 = 1_000_000;

  it('offers again after the retry-after', () => {
    expect(reofferAt({ now: T0, retryAfterSec: 2, admittedAt: T0, deadline: T0 + 30_000, decision: 0 })).toEqual({ kind: 'reoffer', dueAt: T0 + 2_000 });
  });

  it('spaces offers by at least 1/MAX_DECISIONS of the deadline window, so there are never more than MAX_DECISIONS', () => {
    const window = 3_600_000;
    const next = reofferAt({ now: T0, retryAfterSec: 1, admittedAt: T0, deadline: T0 + window, decision: 0 });
    expect(next).toEqual({ kind: 'reoffer', dueAt: T0 + window / MAX_DECISIONS });
    let now = T0;
    let decisions = 0;
    for (let r = reofferAt({ now, retryAfterSec: 1, admittedAt: T0, deadline: T0 + window, decision: 0 }); r.kind === 'reoffer'; r = reofferAt({ now, retryAfterSec: 1, admittedAt: T0, deadline: T0 + window, decision: decisions })) {
      now = r.dueAt;
      decisions++;
    }
    expect(decisions).toBeLessThan(MAX_DECISIONS);
  });

  it('is too late when the next offer would be at or past the deadline', () => {
    expect(reofferAt({ now: T0, retryAfterSec: 5, admittedAt: T0 - 25_000, deadline: T0 + 5_000, decision: 3 })).toEqual({ kind: 'too_late' });
    expect(reofferAt({ now: T0, retryAfterSec: 5, admittedAt: T0 - 25_000, deadline: T0 + 5_001, decision: 3 })).toEqual({ kind: 'reoffer', dueAt: T0 + 5_000 });
  });

  it('is too late at the last decision the status sequence has room for', () => {
    expect(MAX_DECISIONS).toBe(heldSequence(1));
    expect(reofferAt({ now: T0, retryAfterSec: 1, admittedAt: T0, deadline: T0 + 86_400_000, decision: MAX_DECISIONS - 2 }).kind).toBe('reoffer');
    expect(reofferAt({ now: T0, retryAfterSec: 1, admittedAt: T0, deadline: T0 + 86_400_000, decision: MAX_DECISIONS - 1 })).toEqual({ kind: 'too_late' });
  });
});

describe("a record's age: when its request arrived, and whether it is too old to decide", () => {
  const READ_AT = 1_700_000_000_000;

  it("is the record's timestamp: the broker's append time on a topic Sluice made", () => {
    expect(recordWrittenAt(String(READ_AT - 90_000), READ_AT)).toBe(READ_AT - 90_000);
  });

  it('is the reading when the timestamp is missing or not a time', () => {
    for (const timestamp of [undefined, '-1', '0', '', 'soon', '1.5', '1e400']) expect(recordWrittenAt(timestamp, READ_AT)).toBe(READ_AT);
  });

  it('is never later than the reading, so no producer clock (CreateTime) lengthens a budget', () => {
    fc.assert(
      fc.property(fc.integer({ min: -1, max: 2 * READ_AT }), (timestamp) => {
        const writtenAt = recordWrittenAt(String(timestamp), READ_AT);
        expect(writtenAt).toBeLessThanOrEqual(READ_AT);
        if (timestamp > 0 && timestamp <= READ_AT) expect(writtenAt).toBe(timestamp);
      }),
    );
  });

  it('is too old past maxRecordAgeMs, not at it, and says when it was written and the bound', () => {
    const max = config.ingress.maxRecordAgeMs;
    expect(max).toBe(3_600_000);
    expect(staleRecord(READ_AT - max, READ_AT, max)).toBeUndefined();
    expect(staleRecord(READ_AT, READ_AT, max)).toBeUndefined();
    expect(staleRecord(READ_AT - max - 1, READ_AT, max)).toBe(
      `its record was written at ${new Date(READ_AT - max - 1).toISOString()}, 3600001 ms before the ingress could decide it, past ingress.maxRecordAgeMs (3600000 ms)`,
    );
  });
});

describe('answers as status events', () => {
  const base: IngressAnswer = {
    runId: '01890a5d-ac96-774b-bcce-b302099a8057',
    token: 'ns.sluice.runs.requests/0/17',
    outcome: 'deferred',
    reason: 'rate_limited',
    decision: 2,
    admittedAt: 1_000,
    deadline: 31_000,
    runClass: 'interactive',
    workflow: 'support-reply',
    traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    decidedAt: 5_000,
    retryAfterSec: 2,
    reofferAt: 7_000,
  };

  it('a deferral: status deferred, sequence = decision, the reason code and retry-after, the request id bound to its tenant', () => {
    const e = answerStatusEvent(base, 'tenant-a', 'req-9');
    expect(e).toMatchObject({ status: 'deferred', sequence: 2, tenantId: 'tenant-a', requestId: 'tenant-a:req-9', retryAfterSec: 2, error: { code: 'rate_limited', retryable: true }, occurredAt: 5_000, attempt: 0 });
    expect(e.message).toBe('deferred: rate_limited; offered to admission again at 1970-01-01T00:00:07.000Z');
    expect(answerStatus('deferred')).toBe(429);
  });

  it('a rejection carries the contract reason code', () => {
    const e = answerStatusEvent({ ...base, outcome: 'rejected', reason: 'deadline_unreachable' }, 'tenant-a', 'req-9');
    expect(e).toMatchObject({ status: 'rejected', error: { code: 'deadline_unreachable' } });
    expect(answerStatus('rejected')).toBe(503);
  });

  it("a rejection of a record too old says so in the error, under the contract's code", () => {
    const detail = 'its record was written at 1970-01-01T00:00:01.000Z, past ingress.maxRecordAgeMs';
    const e = answerStatusEvent({ ...base, outcome: 'rejected', reason: 'deadline_unreachable', detail }, 'tenant-a', 'req-9');
    expect(e).toMatchObject({ status: 'rejected', error: { code: 'deadline_unreachable', message: detail, retryable: true } });
  });

  it('a re-offer of the kept deferral, dead-lettered, ends its run: the next decision, dead_lettered, not retryable', () => {
    const dead = { reason: 'invalid_request' as const, detail: 'deadlineMs must be at most 30000', at: 9_000 };
    const ended = endedDeferral(base, base.runId, dead);
    expect(ended).toMatchObject({ runId: base.runId, token: base.token, outcome: 'dead_lettered', reason: 'invalid_request', decision: 3, decidedAt: 9_000, deadline: 31_000 });
    expect(ended).not.toHaveProperty('retryAfterSec');
    expect(ended).not.toHaveProperty('reofferAt');
    const e = answerStatusEvent(ended!, 'tenant-a', 'req-9');
    expect(e).toMatchObject({ status: 'dead_lettered', sequence: 3, requestId: 'tenant-a:req-9', retryAfterSec: null, occurredAt: 9_000, error: { code: 'invalid_request', message: dead.detail, retryable: false } });
    expect(e.message).toBe('dead_lettered: its re-offer was archived in the DLQ (reason invalid_request); it never runs');
    expect(answerStatus('dead_lettered')).toBe(400);
  });

  it('ends nothing but a re-offer of the very deferral kept under the key', () => {
    const dead = { reason: 'invalid_request' as const, detail: 'x', at: 9_000 };
    // No re-offer header, another run's, nothing kept, or a kept answer that is no deferral.
    expect(endedDeferral(base, undefined, dead)).toBeUndefined();
    expect(endedDeferral(base, '01890a5d-ac96-774b-bcce-000000000000', dead)).toBeUndefined();
    expect(endedDeferral(undefined, base.runId, dead)).toBeUndefined();
    for (const outcome of ['queued', 'rejected', 'dead_lettered'] as const) expect(endedDeferral({ ...base, outcome }, base.runId, dead)).toBeUndefined();
  });

  it('an admission is queued, without error or retry-after', () => {
    const e = answerStatusEvent({ ...base, outcome: 'queued', reason: 'waiting_for_capacity', queuePosition: 3, retryAfterSec: undefined }, 'tenant-a', 'req-9');
    expect(e).toMatchObject({ status: 'queued', error: null, retryAfterSec: null, message: 'queued: waiting for capacity, position 3 in line' });
    expect(answerStatus('admitted')).toBe(202);
  });
});
