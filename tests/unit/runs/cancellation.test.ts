import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/obs/logger.js';
import { RedisCancellations } from '../../../src/runs/cancellation.js';
import { redisKeys } from '../../../src/redis/keys.js';

const NOW = 1_700_000_000_000;
const RUN = '0190f5a2-7c00-7abc-8def-0123456789ab';
const keys = redisKeys('ns.');

function cancellations(redis: Partial<Record<'set' | 'get', (...args: unknown[]) => Promise<unknown>>>) {
  return new RedisCancellations(redis as unknown as Redis, keys, createLogger('silent'), { checkTimeoutMs: 30, now: () => NOW });
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

  it('keeps the key a minute even when the deadline has already passed', async () => {
    const calls: unknown[][] = [];
    await cancellations({ set: async (...args) => calls.push(args) }).request(RUN, NOW - 10 * 60_000);
    expect(calls[0]![3]).toBe(60_000);
  });

  it('reads the reason from the key; a key written before reasons existed ("1") is the caller\'s', async () => {
    const asked: unknown[] = [];
    const c = (value: string | null) => cancellations({ get: async (key) => (asked.push(key), value) });
    expect(await c('requested').cancelReason(RUN)).toBe('requested');
    expect(await c('not_acknowledged').cancelReason(RUN)).toBe('not_acknowledged');
    expect(await c('1').cancelReason(RUN)).toBe('requested');
    expect(await c(null).cancelReason(RUN)).toBeUndefined();
    expect(asked).toEqual(Array(4).fill(keys.cancelRequested(RUN)));
  });

  it('treats a failing or hanging Redis as "not cancelled", within the check timeout', async () => {
    expect(await cancellations({ get: async () => Promise.reject(new Error('ECONNREFUSED')) }).cancelReason(RUN)).toBeUndefined();
    const started = Date.now();
    expect(await cancellations({ get: () => new Promise(() => undefined) }).cancelReason(RUN)).toBeUndefined();
    expect(Date.now() - started).toBeLessThan(1_000);
  });
});
