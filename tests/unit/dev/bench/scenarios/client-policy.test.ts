import { describe, expect, it } from 'vitest';
import { retryDelayMs, sendOutcome, wantsRetry } from '../../../../../src/dev/bench/scenarios/client-policy.js';

describe('client policy', () => {
  it('reads an answer: 202 with a run id is accepted, 429 and 503 are refusals, anything else an error', () => {
    expect(sendOutcome(202, { runId: 'r1' })).toEqual({ kind: 'accepted', runId: 'r1' });
    expect(sendOutcome(429, { code: 'rate_limited' })).toEqual({ kind: 'refused', status: 429, code: 'rate_limited' });
    expect(sendOutcome(503, { code: 'overloaded' })).toEqual({ kind: 'refused', status: 503, code: 'overloaded' });
    expect(sendOutcome(400, { code: 'invalid_request' })).toEqual({ kind: 'error', status: 400, code: 'invalid_request' });
    expect(sendOutcome(500, undefined)).toEqual({ kind: 'error', status: 500, code: 'http_500' });
    expect(sendOutcome(202, {})).toEqual({ kind: 'error', status: 202, code: 'accepted_without_run_id' });
  });

  it('retries refusals, transport errors and runs that failed, expired or were dead-lettered; nothing else', () => {
    const accepted = { kind: 'accepted' as const, runId: 'r' };
    expect(wantsRetry({ outcome: { kind: 'refused', status: 429, code: 'rate_limited' } })).toBe(true);
    expect(wantsRetry({ outcome: { kind: 'transport', message: 'ECONNRESET' } })).toBe(true);
    for (const status of ['failed', 'expired', 'dead_lettered']) expect(wantsRetry({ outcome: accepted, terminalStatus: status })).toBe(true);
    for (const status of ['completed', 'cancelled', undefined]) expect(wantsRetry({ outcome: accepted, terminalStatus: status })).toBe(false);
    expect(wantsRetry({ outcome: { kind: 'error', status: 400, code: 'invalid_request' } })).toBe(false);
  });

  it('waits the next delay of the policy, divided by the time scale, and gives up after the last', () => {
    const fixed = { kind: 'fixed' as const, delaysSec: [1, 2, 4, 8] };
    expect([1, 2, 3, 4, 5].map((a) => retryDelayMs(fixed, a, 1))).toEqual([1000, 2000, 4000, 8000, undefined]);
    expect(retryDelayMs(fixed, 3, 4)).toBe(1000);
    expect(retryDelayMs({ kind: 'none' }, 1, 1)).toBeUndefined();
  });
});
