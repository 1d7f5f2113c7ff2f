import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/obs/logger.js';
import { RedisCancellations } from '../../../src/processors/cancellation.js';
import { redisKeys } from '../../../src/redis/keys.js';

const NOW = 1_700_000_000_000;
const RUN = '0190f5a2-7c00-7abc-8def-0123456789ab';
const keys = redisKeys('ns.');

function cancellations(redis: Partial<Record<'set' | 'exists', (...args: unknown[]) => Promise<unknown>>>) {
  return new RedisCancellations(redis as unknown as Redis, keys, createLogger('silent'), { checkTimeoutMs: 30, now: () => NOW });
}

describe('RedisCancellations', () => {
  it('sets the run key until a minute past the deadline', async () => {
    const calls: unknown[][] = [];
    await cancellations({ set: async (...args) => calls.push(args) }).request(RUN, NOW + 30_000);
    expect(calls).toEqual([[keys.cancelRequested(RUN), '1', 'PX', 90_000]]);
  });

  it('keeps the key a minute even when the deadline has already passed', async () => {
    const calls: unknown[][] = [];
    await cancellations({ set: async (...args) => calls.push(args) }).request(RUN, NOW - 10 * 60_000);
    expect(calls[0]![3]).toBe(60_000);
  });

  it('reads the key with EXISTS', async () => {
    const asked: unknown[] = [];
    const c = (n: number) => cancellations({ exists: async (key) => (asked.push(key), n) });
    expect(await c(1).isCancelRequested(RUN)).toBe(true);
    expect(await c(0).isCancelRequested(RUN)).toBe(false);
    expect(asked).toEqual([keys.cancelRequested(RUN), keys.cancelRequested(RUN)]);
  });

  it('treats a failing or hanging Redis as "not cancelled", within the check timeout', async () => {
    expect(await cancellations({ exists: async () => Promise.reject(new Error('ECONNREFUSED')) }).isCancelRequested(RUN)).toBe(false);
    const started = Date.now();
    expect(await cancellations({ exists: () => new Promise(() => undefined) }).isCancelRequested(RUN)).toBe(false);
    expect(Date.now() - started).toBeLessThan(1_000);
  });
});
