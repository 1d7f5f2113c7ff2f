import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_KEY, http } from '../harness.js';
import { expectDrillInvariants, resetSimStats, settleAndWeigh } from '../../support/drill-invariants.js';
import { DrillLog, MIXED_TENANTS, steadyLoad } from '../../support/drill-load.js';
import { startDrillStack, type DrillStack } from '../../support/drill-stack.js';

/** Past these, a run has overrun its deadline: the timeouts and the deadline did not bound it. */
const DEADLINE_SLACK_MS = 5_000;
/** Interactive deadlines shorter than the hang, so runs cannot simply wait it out. */
const STREAMS = MIXED_TENANTS.map((s) => (s.workflow === 'support-reply' ? { ...s, deadlineMs: 8_000 } : s));

/**
 * The LLM provider accepts connections and never answers, for 10 s, under steady load from three
 * tenants. Short call budgets (connect 0.5 s, idle 2 s, total 3 s) keep the drill short; the
 * point is that every budget is exceeded and still every run ends — degraded, failed or expired
 * by tenant policy, or completed once the provider is back — none later than its deadline.
 * Interactive deadlines (8 s) are shorter than the hang, so waiting it out is not an option.
 */
describe('drill: the provider hangs past every timeout', () => {
  let stack: DrillStack;
  const faults = (init: Parameters<typeof http>[1]) => http(`${stack.sim}/admin/faults`, { key: ADMIN_KEY, ...init });

  beforeAll(async () => {
    stack = await startDrillStack({
      label: 'drill-hang',
      overrides: { dependencies: { anthropic: { timeouts: { connectMs: 500, readMs: 2_000, totalMs: 3_000 } } } },
    });
  });

  afterAll(async () => {
    await faults({ method: 'DELETE' }).catch(() => undefined);
    await stack?.stop();
  });

  it('ends every run by tenant policy and deadline while the provider hangs', async () => {
    const log = new DrillLog(stack.api);
    await resetSimStats(stack.sim);
    const load = steadyLoad(log, { streams: STREAMS, ratePerSec: 6, durationMs: 20_000, maxRequests: 120, readBack: true });
    await sleep(3_000);
    expect((await faults({ method: 'PUT', json: { target: 'anthropic', hang: true } })).status).toBe(200);
    await sleep(10_000);
    expect((await faults({ method: 'DELETE' })).status).toBe(204);
    await load;

    const verdict = await settleAndWeigh({ name: 'provider-hang', log, sim: stack.sim, config: stack.config, terminalWithinMs: 60_000, processes: [stack.front] });
    expectDrillInvariants(verdict);
    const overran = [...verdict.views.values()].filter((v) => v.finishedAt && Date.parse(v.finishedAt) > Date.parse(v.deadline) + DEADLINE_SLACK_MS).map((v) => ({ runId: v.runId, status: v.status, deadline: v.deadline, finishedAt: v.finishedAt }));
    expect.soft(overran, 'no run ends later than its deadline').toEqual([]);
    expect.soft(Object.keys(verdict.byStatus).filter((s) => !['completed', 'failed', 'expired', 'dead_lettered'].includes(s)), 'runs end completed (maybe degraded), failed or expired').toEqual([]);
  }, 120_000);
});
