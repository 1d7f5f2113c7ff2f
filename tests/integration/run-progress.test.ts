import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisRunProgress } from '../../src/execution/run-progress.js';
import { createLogger } from '../../src/obs/logger.js';
import { redisKeys } from '../../src/redis/keys.js';
import { LuaScripts } from '../../src/redis/scripts.js';
import { RedisCancellations } from '../../src/runs/cancellation.js';
import { newRunId } from '../../src/runs/run-id.js';
import { testNamespace } from './harness.js';
import type { RedisClient } from '../../src/redis/client.js';
import { connectRedis, deleteMatching, REDIS_BACKENDS } from './lua/redis-clients.js';

/**
 * A run's progress against a real Redis: run-progress-open.lua and run-progress-record.lua through
 * RedisRunProgress, with cancellations written as the API writes them.
 */
const ns = testNamespace('run-progress');
const keys = redisKeys(ns);
let redis: RedisClient;
let progress: RedisRunProgress;
let cancellations: RedisCancellations;

describe.each(REDIS_BACKENDS)('on %s', (backend) => {
  beforeAll(async () => {
    redis = connectRedis(backend);
    await redis.ping();
    progress = new RedisRunProgress(redis, new LuaScripts(redis), keys, createLogger('silent'), { produceTimeoutMs: 1_000 });
    cancellations = new RedisCancellations(redis, keys);
  });

  afterAll(async () => {
    if (!redis) return;
    await deleteMatching(redis, `${ns}*`);
    redis.disconnect();
  });

  describe('RedisRunProgress', () => {
    it('recalls every recorded step in one read, and nothing for a run never seen', async () => {
      const runId = newRunId();
      expect(await progress.open(runId)).toEqual({ done: new Map(), cancelled: undefined });
      const deadline = Date.now() + 60_000;
      expect(await progress.record(runId, 'understand', { text: 'order 42', usage: { inputTokens: 3 } }, deadline)).toBeUndefined();
      expect(await progress.record(runId, 'lookup-order', null, deadline)).toBeUndefined();
      const start = await progress.open(runId);
      expect([...start.done]).toEqual([
        ['understand', { text: 'order 42', usage: { inputTokens: 3 } }],
        ['lookup-order', null],
      ]);
      expect(await redis.hkeys(keys.runSteps(runId))).toEqual(['understand', 'lookup-order']);
    });

    it("adds each attempt's calls to the run's and ends the run once per admission, taking them all", async () => {
      const runId = newRunId();
      const run = { runId, admittedAt: Date.now(), deadline: Date.now() + 60_000 };
      await progress.addCalls(runId, new Map([['anthropic', 2]]), run.deadline);
      await progress.addCalls(runId, new Map([['anthropic', 1], ['orders', 1]]), run.deadline);
      expect(await progress.end(run, new Map([['anthropic', 1]]))).toEqual(new Map([['anthropic', 4], ['orders', 1]]));
      // A redelivery of the ended run: nothing to count again.
      expect(await progress.end(run, new Map([['anthropic', 1]]))).toBeUndefined();
      expect(await redis.pttl(keys.runCalls(runId))).toBeGreaterThan(60_000);
      // A DLQ replay is a new admission: it ends anew, with its own calls only.
      expect(await progress.end({ ...run, admittedAt: run.admittedAt + 1 }, new Map([['anthropic', 1]]))).toEqual(new Map([['anthropic', 1]]));
    });

    it('reads the cancellation with the steps at the start, and with each recorded step', async () => {
      const runId = newRunId();
      const deadline = Date.now() + 60_000;
      expect(await progress.record(runId, 'understand', { text: 'a' }, deadline)).toBeUndefined();
      await cancellations.request(runId, deadline);
      expect(await progress.record(runId, 'lookup-order', { orderId: '42' }, deadline)).toBe('requested');
      expect(await progress.open(runId)).toMatchObject({ cancelled: 'requested' });
      expect(await progress.cancelReason(runId)).toBe('requested');
      const refused = newRunId();
      await cancellations.withdraw(refused, deadline);
      expect(await progress.open(refused)).toEqual({ done: new Map(), cancelled: 'not_acknowledged' });
    });

    it("waits at the start while the submission's answer is pending: the 202 lets the run start, the 503 cancels it", async () => {
      const deadline = Date.now() + 60_000;
      const accepted = newRunId();
      await cancellations.markAnswerPending(accepted, 1_000);
      expect(await redis.pttl(keys.answerPending(accepted))).toBeGreaterThan(10_000);
      const acceptedStart = progress.open(accepted);
      await new Promise((r) => setTimeout(r, 150));
      await cancellations.markAnswered(accepted);
      expect(await acceptedStart).toEqual({ done: new Map(), cancelled: undefined });

      const refused = newRunId();
      await cancellations.markAnswerPending(refused, 1_000);
      const refusedStart = progress.open(refused);
      await new Promise((r) => setTimeout(r, 150));
      await cancellations.withdraw(refused, deadline);
      expect(await refusedStart).toEqual({ done: new Map(), cancelled: 'not_acknowledged' });
      // The refusal leaves the pending mark to expire; it no longer holds anything up.
      expect(await progress.open(refused)).toEqual({ done: new Map(), cancelled: 'not_acknowledged' });
    });

    it('keeps the outputs until an hour after the deadline, renewed by each record, and then forgets them', async () => {
      const runId = newRunId();
      await progress.record(runId, 'understand', { text: 'a' }, Date.now() + 60_000);
      const ttl = await redis.pttl(keys.runSteps(runId));
      expect(ttl).toBeGreaterThan(3_600_000 + 50_000);
      expect(ttl).toBeLessThanOrEqual(3_660_000);
      // A deadline long past: kept one second, the least, then the run starts from nothing.
      await progress.record(runId, 'reply', { text: 'b' }, Date.now() - 10 * 3_600_000);
      expect(await redis.pttl(keys.runSteps(runId))).toBeLessThanOrEqual(1_000);
      await new Promise((r) => setTimeout(r, 1_200));
      expect(await progress.open(runId)).toEqual({ done: new Map(), cancelled: undefined });
    });
  });
});
