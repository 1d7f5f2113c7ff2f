import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { RedisCancellations, answerPendingMs, cancelReasonOf } from '../../../src/runs/cancellation.js';
import { redisKeys } from '../../../src/redis/keys.js';

const NOW = 1_700_000_000_000;
const RUN = '0190f5a2-7c00-7abc-8def-0123456789ab';
const keys = redisKeys('ns.');

function cancellations(redis: Partial<Record<'set' | 'get' | 'del', (...args: unknown[]) => Promise<unknown>>>) {
  return new RedisCancellations(redis as unknown as Redis, keys, { now: () => NOW });
}

describe('RedisCancellations', () => {
  it('sets the run key until a minute past the deadline', async () => {
    const calls: unknown[][] = [];
    await cancellations({ set: async (...args) => calls.push(args) }).request(RUN, NOW + 30_000);
    expect(calls).toEqual([[keys.cancelRequested(RUN), 'requested', 'PX', 90_000]]);
  });

  it('marks a submission refused after its produce may have reached Kafka the same way, with its own reason', async () => {
    const calls: unknown[][] = [];
    await cancellations({ set: async (...args) => calls.push(args) }).withdraw(RUN, NOW + 30_000);
    expect(calls).toEqual([[keys.cancelRequested(RUN), 'not_acknowledged', 'PX', 90_000]]);
  });

  it("marks a submission's answer pending for the produce timeout and a grace, and clears the mark once accepted", async () => {
    const calls: unknown[][] = [];
    const marks = cancellations({ set: async (...args) => calls.push(['set', ...args]), del: async (...args) => calls.push(['del', ...args]) });
    await marks.markAnswerPending(RUN, 5_000);
    await marks.markAnswered(RUN);
    expect(calls).toEqual([
      ['set', keys.answerPending(RUN), '1', 'PX', 15_000],
      ['del', keys.answerPending(RUN)],
    ]);
    expect(answerPendingMs(5_000)).toBe(15_000);
  });

  it('keeps the key a minute even when the deadline has already passed', async () => {
    const calls: unknown[][] = [];
    await cancellations({ set: async (...args) => calls.push(args) }).request(RUN, NOW - 10 * 60_000);
    expect(calls[0]![3]).toBe(60_000);
  });

  it('reads the reason from the key; absent is null (GET) or empty (the run-progress scripts); a key written before reasons existed ("1") is the caller\'s', () => {
    expect(cancelReasonOf('requested')).toBe('requested');
    expect(cancelReasonOf('not_acknowledged')).toBe('not_acknowledged');
    expect(cancelReasonOf('1')).toBe('requested');
    expect(cancelReasonOf(null)).toBeUndefined();
    expect(cancelReasonOf('')).toBeUndefined();
  });
});
