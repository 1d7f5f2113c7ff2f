import { describe, expect, it } from 'vitest';
import type { RunStatusChanged } from '../../../src/events/schemas.js';
import { statusEvent } from './status-event.js';
import { outcomeAt, outcomeOf, progressWith, toRunSubmission, type RequestProgress, type SubmitRequest } from '../../../src/producers/submission.js';

const REQUEST: SubmitRequest = { workflow: 'support-reply', input: { orderId: '42' }, idempotencyKey: 'order-42' };
const newId = () => 'req-1';

describe('a request as a RunSubmission', () => {
  it('carries the tenant, the input as JSON text, and nulls for defaults', () => {
    expect(toRunSubmission('tenant-a', REQUEST, newId)).toEqual({
      ok: true,
      submission: { requestId: 'req-1', idempotencyKey: 'order-42', tenantId: 'tenant-a', workflow: 'support-reply', input: '{"orderId":"42"}', class: null, deadlineMs: null },
    });
    expect(toRunSubmission('tenant-a', { ...REQUEST, class: 'batch', deadlineMs: 5_000, requestId: 'mine' }, newId)).toMatchObject({ ok: true, submission: { requestId: 'mine', class: 'batch', deadlineMs: 5_000 } });
  });

  it.each([
    ['workflow', { workflow: '' }],
    ['idempotencyKey', { idempotencyKey: 'has space' }],
    ['idempotencyKey', { idempotencyKey: 'k'.repeat(256) }],
    ['idempotencyKey', { idempotencyKey: undefined as unknown as string }],
    ['requestId', { requestId: '' }],
    ['class', { class: 'urgent' as never }],
    ['deadlineMs', { deadlineMs: 0 }],
    ['deadlineMs', { deadlineMs: 1.5 }],
    ['input', { input: undefined }],
    ['input', { input: { n: 1n } }],
  ])('refuses a bad %s, naming it', (field, over) => {
    expect(toRunSubmission('tenant-a', { ...REQUEST, ...over }, newId)).toMatchObject({ ok: false, field });
  });
});

const event = (over: Partial<RunStatusChanged>): RunStatusChanged => statusEvent({ requestId: 'req-1', ...over });

describe('outcomes from status events', () => {
  it('reads the code and retry-after of a deferral, and the parsed result of a completed run', () => {
    expect(outcomeOf('req-1', event({ status: 'deferred', error: { code: 'rate_limited', message: 'x', retryable: true }, retryAfterSec: 2 }))).toMatchObject({
      status: 'deferred',
      code: 'rate_limited',
      retryAfterSec: 2,
      runId: 'run-1',
    });
    expect(outcomeOf('req-1', event({ status: 'completed', sequence: 9, result: '{"reply":"ok"}', requestId: null }))).toMatchObject({ status: 'completed', result: { reply: 'ok' } });
  });

  it('waits past deferrals for admission, and for the run end for terminal', () => {
    let p: RequestProgress = {};
    const take = (e: RunStatusChanged, answer = true) => (p = progressWith(p, outcomeOf('req-1', e), answer));
    take(event({ status: 'deferred', error: { code: 'rate_limited', message: 'x', retryable: true } }));
    expect(outcomeAt(p, 'answer')?.status).toBe('deferred');
    expect(outcomeAt(p, 'admission')).toBeUndefined();
    take(event({ status: 'queued', sequence: 1 }));
    expect(outcomeAt(p, 'admission')?.status).toBe('queued');
    take(event({ status: 'running', sequence: 5, requestId: null }), false);
    expect(outcomeAt(p, 'answer')?.status).toBe('queued');
    expect(outcomeAt(p, 'terminal')).toBeUndefined();
    take(event({ status: 'completed', sequence: 6, requestId: null }), false);
    expect(outcomeAt(p, 'terminal')?.status).toBe('completed');
  });

  it('keeps what it knows when an older event is read again', () => {
    let p: RequestProgress = {};
    p = progressWith(p, outcomeOf('req-1', event({ status: 'queued', sequence: 1 })), true);
    p = progressWith(p, outcomeOf('req-1', event({ status: 'deferred', sequence: 0 })), true);
    expect(outcomeAt(p, 'admission')?.status).toBe('queued');
  });

  it('ends a rejected request at every stage', () => {
    const p = progressWith({}, outcomeOf('req-1', event({ status: 'rejected', error: { code: 'deadline_unreachable', message: 'x', retryable: true } })), true);
    for (const stage of ['answer', 'admission', 'terminal'] as const) expect(outcomeAt(p, stage)?.code).toBe('deadline_unreachable');
  });
});
