import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectDrillInvariants, resetSimStats, settleAndWeigh } from '../../support/drill-invariants.js';
import { DrillLog, MIXED_TENANTS, steadyLoad } from '../../support/drill-load.js';
import { startDrillStack, type DrillStack } from '../../support/drill-stack.js';

/**
 * at-least-once.test.ts kills the processor under one run; this kills it under steady load from
 * three tenants, with many runs mid-step (300 ms LLM calls), and starts a new one. Redelivered
 * runs must end, and the tool steps they repeat are absorbed by the Idempotency-Key (counted as
 * duplicates) instead of taking effect twice.
 */
describe('drill: processor SIGKILLed under steady load', () => {
  let stack: DrillStack;

  beforeAll(async () => {
    stack = await startDrillStack({ label: 'drill-kill', splitProcessor: true, overrides: { simulator: { anthropicLatencyMs: 300, anthropicJitterMs: 50 } } });
  });

  afterAll(async () => {
    await stack?.stop();
  });

  it('ends every run and applies each tool step once across the kill', async () => {
    const log = new DrillLog(stack.api);
    await resetSimStats(stack.sim);
    const load = steadyLoad(log, { streams: MIXED_TENANTS, ratePerSec: 6, durationMs: 15_000, maxRequests: 90 });
    await sleep(5_000);
    await stack.processor!.kill9();
    const replacement = await stack.startProcessor();
    await load;

    const verdict = await settleAndWeigh({ name: 'processor-sigkill', log, sim: stack.sim, config: stack.config, terminalWithinMs: 60_000, processes: [stack.front, replacement] });
    expectDrillInvariants(verdict);
    expect(verdict.byStatus.completed, 'runs complete after the kill').toBeGreaterThan(0);
  }, 120_000);
});
