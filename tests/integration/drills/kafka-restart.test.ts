import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectDrillInvariants, refusedSubmissions, resetSimStats, settleAndWeigh } from '../../support/drill-invariants.js';
import { DrillLog, MIXED_TENANTS, steadyLoad } from '../../support/drill-load.js';
import { startDrillStack, type DrillStack } from '../../support/drill-stack.js';
import { startThrowawayKafka, type ThrowawayKafka } from '../../support/throwaway-kafka.js';

/**
 * The only broker of a cluster restarted under steady load from three tenants (its data kept, as
 * in a rolling restart of a one-node cluster): submissions that Kafka cannot acknowledge get the
 * documented 503 (never a 202 for an unacknowledged run), consumers and producers find the broker
 * again, and every run admitted before, during or after ends.
 */
describe('drill: Kafka broker restarted', () => {
  let kafka: ThrowawayKafka;
  let stack: DrillStack;

  beforeAll(async () => {
    kafka = await startThrowawayKafka();
    stack = await startDrillStack({ label: 'drill-kafka', env: { KAFKA_BROKERS: kafka.brokers.join(',') } });
  });

  afterAll(async () => {
    await stack?.stop();
    await kafka?.close();
  });

  it('keeps its contract through the restart and flows again after it', async () => {
    const log = new DrillLog(stack.api);
    await resetSimStats(stack.sim);
    const load = steadyLoad(log, { streams: MIXED_TENANTS, ratePerSec: 5, durationMs: 35_000, maxRequests: 175, readBack: true });
    await sleep(5_000);
    await kafka.stop();
    await kafka.start();
    const restartedAt = Date.now();
    await load;

    const verdict = await settleAndWeigh({ name: 'kafka-broker-restart', log, sim: stack.sim, config: stack.config, terminalWithinMs: 60_000, processes: [stack.front] });
    expectDrillInvariants(verdict);
    expect.soft(log.exchanges.filter((e) => e.method === 'POST' && e.at > restartedAt + 5_000 && e.status === 202).length, 'submissions are admitted again once the broker is back').toBeGreaterThan(0);
    // A 503 says "it was not accepted": a refused submission whose event lands late must not run.
    const { refused, ranAnyway } = await refusedSubmissions(stack.front, log, MIXED_TENANTS);
    console.log(`DRILL kafka-broker-restart: refused with 503=${refused} of which ran anyway=${ranAnyway.length}`);
    expect.soft(ranAnyway, 'a submission refused with 503 does not run later').toEqual([]);
  }, 150_000);
});
