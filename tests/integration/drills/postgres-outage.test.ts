import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { expectDrillInvariants, resetSimStats, settleAndWeigh } from '../../support/drill-invariants.js';
import { DrillLog, MIXED_TENANTS, steadyLoad } from '../../support/drill-load.js';
import { startDrillStack, type DrillStack } from '../../support/drill-stack.js';
import { postgresProxy, type PostgresProxy } from '../../support/postgres-proxy.js';

/**
 * Postgres unreachable for 10 s for the API and both sinks (their only way to it is a proxy the
 * drill cuts) under steady load from three tenants: submissions stay durable in Kafka (the read
 * model is repaired by the status sink afterwards), reads answer 503 problem+json rather than a
 * bare 500, and every run admitted before, during or after reads a terminal status in the end.
 */
describe('drill: Postgres unreachable for the API and the sinks', () => {
  let proxy: PostgresProxy;
  let stack: DrillStack;

  beforeAll(async () => {
    proxy = await postgresProxy(inject('infra').databaseUrl);
    stack = await startDrillStack({ label: 'drill-pg', env: { DATABASE_URL: proxy.url } });
  });

  afterAll(async () => {
    await stack?.stop();
    await proxy?.close();
  });

  it('keeps its contract through the outage and repairs the read model after it', async () => {
    const log = new DrillLog(stack.api);
    await resetSimStats(stack.sim);
    const load = steadyLoad(log, { streams: MIXED_TENANTS, ratePerSec: 6, durationMs: 20_000, maxRequests: 120, readBack: true });
    await sleep(5_000);
    await proxy.cut();
    const cutAt = Date.now();
    await sleep(10_000);
    await proxy.restore();
    await load;

    const verdict = await settleAndWeigh({ name: 'postgres-unreachable', log, sim: stack.sim, config: stack.config, terminalWithinMs: 60_000, processes: [stack.front] });
    expectDrillInvariants(verdict);
    const duringCut = log.exchanges.filter((e) => e.method === 'POST' && e.at > cutAt + 1_000 && e.at < cutAt + 9_000);
    expect.soft(duringCut.filter((e) => e.status === 202).length, 'submissions are still admitted while Postgres is away (durable in Kafka)').toBeGreaterThan(0);
  }, 120_000);
});
