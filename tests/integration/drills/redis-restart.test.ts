import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectDrillInvariants, resetSimStats, settleAndWeigh } from '../../support/drill-invariants.js';
import { DrillLog, MIXED_TENANTS, steadyLoad } from '../../support/drill-load.js';
import { startDrillStack, type DrillStack } from '../../support/drill-stack.js';
import { startThrowawayRedis, type ThrowawayRedis } from '../../support/throwaway-redis.js';

/**
 * Redis gone for 8 s under steady load from three tenants, then back EMPTY: no buckets, no
 * backlog, no permits, no step journal, no idempotency records. Submissions during the outage get
 * the documented 503 (fail closed), every run admitted before, during or after ends, and no tool
 * step takes effect twice although the journal that would have skipped it is gone.
 */
describe('drill: Redis stopped and restarted empty', () => {
  let redis: ThrowawayRedis;
  let stack: DrillStack;

  beforeAll(async () => {
    redis = await startThrowawayRedis();
    stack = await startDrillStack({ label: 'drill-redis', env: { REDIS_URL: redis.url } });
  });

  afterAll(async () => {
    await stack?.stop();
    await redis?.close();
  });

  it('keeps its contract through the outage and recovers on an empty Redis', async () => {
    const log = new DrillLog(stack.api);
    await resetSimStats(stack.sim);
    const load = steadyLoad(log, { streams: MIXED_TENANTS, ratePerSec: 6, durationMs: 20_000, maxRequests: 120, readBack: true });
    await sleep(5_000);
    await redis.stop();
    await sleep(8_000);
    await redis.start();
    const restartedAt = Date.now();
    await load;

    const verdict = await settleAndWeigh({ name: 'redis-restart-empty', log, sim: stack.sim, config: stack.config, terminalWithinMs: 60_000, processes: [stack.front] });
    expectDrillInvariants(verdict);
    expect.soft(log.exchanges.filter((e) => e.method === 'POST' && e.at > restartedAt + 2_000 && e.status === 202).length, 'submissions are admitted again once Redis is back').toBeGreaterThan(0);
  }, 120_000);
});
