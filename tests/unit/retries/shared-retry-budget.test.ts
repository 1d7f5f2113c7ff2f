import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/obs/logger.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { redisKeys } from '../../../src/redis/keys.js';
import { SharedRetryBudgets } from '../../../src/retries/shared-retry-budget.js';

const POLICY = { budgetRatio: 0.1, budgetWindowMs: 60_000, budgetMinRetries: 1 };

/** The script as a recorder: answers `allowed` (or fails as an unreachable Redis does) and keeps every call's arguments. */
function fakeScripts(answer: () => number | Error) {
  const calls: { key: string; args: readonly (string | number)[] }[] = [];
  const scripts = {
    run: async (_name: string, keys: readonly string[], args: readonly (string | number)[]) => {
      calls.push({ key: keys[0]!, args });
      const a = answer();
      if (a instanceof Error) throw a;
      return [a, 0, 0];
    },
  };
  return { scripts, calls };
}

function budgets(answer: () => number | Error) {
  const { scripts, calls } = fakeScripts(answer);
  const metrics = createMetrics();
  const shared = new SharedRetryBudgets({ scripts, keys: redisKeys('t.'), reportEveryMs: 1_000, metrics, logger: createLogger('silent') });
  return { shared, calls, metrics };
}

const redisDown = () => Object.assign(new Error('Reached the max retries per request limit (which is 1).'), { name: 'MaxRetriesPerRequestError' });

describe('SharedRetryBudgets', () => {
  it('sends the calls counted since the last report with the retry request, to the dependency\'s key', async () => {
    const { shared, calls } = budgets(() => 1);
    for (let i = 0; i < 7; i++) shared.recordCall('anthropic', POLICY);
    expect(await shared.tryRetry('anthropic', POLICY)).toBe(true);
    expect(calls).toEqual([{ key: 't.sluice:retry-budget:{anthropic}', args: [7, 1, 0.1, 60_000, 10, 1] }]);
    await shared.tryRetry('anthropic', POLICY);
    expect(calls[1]!.args[0]).toBe(0);
  });

  it('says no when the shared budget is spent', async () => {
    const { shared } = budgets(() => 0);
    shared.recordCall('erp', POLICY);
    expect(await shared.tryRetry('erp', POLICY)).toBe(false);
  });

  it('reports counted calls per dependency without taking retries, and nothing when there is nothing new', async () => {
    const { shared, calls } = budgets(() => 0);
    shared.recordCall('anthropic', POLICY);
    shared.recordCall('anthropic', POLICY);
    shared.recordCall('erp', POLICY);
    await shared.report();
    expect(calls.map((c) => [c.key, c.args[0], c.args[1]])).toEqual([
      ['t.sluice:retry-budget:{anthropic}', 2, 0],
      ['t.sluice:retry-budget:{erp}', 1, 0],
    ]);
    await shared.report();
    expect(calls).toHaveLength(2);
  });

  it('keeps the calls it could not report for the next report', async () => {
    let down = true;
    const { shared, calls } = budgets(() => (down ? redisDown() : 0));
    for (let i = 0; i < 3; i++) shared.recordCall('anthropic', POLICY);
    await shared.report();
    shared.recordCall('anthropic', POLICY);
    down = false;
    await shared.report();
    expect(calls.map((c) => c.args[0])).toEqual([3, 4]);
  });

  it('lets this process\'s own budget decide while Redis does not answer, and counts those decisions', async () => {
    const { shared, calls, metrics } = budgets(redisDown);
    for (let i = 0; i < 20; i++) shared.recordCall('anthropic', POLICY);
    // Local budget: 10% of 20 calls = 2 retries.
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push(await shared.tryRetry('anthropic', POLICY));
    expect(answers).toEqual([true, true, false]);
    expect((await metrics.registry.getSingleMetric('sluice_retry_budget_local_decisions_total')!.get()).values[0]!.value).toBe(3);
    // The 20 calls stay unreported until Redis answers.
    expect(calls.map((c) => c.args[0])).toEqual([20, 20, 20]);
  });

  it('passes on an error that is not the infrastructure\'s', async () => {
    const { shared } = budgets(() => new TypeError('bug'));
    await expect(shared.tryRetry('anthropic', POLICY)).rejects.toThrow('bug');
  });

  it('makes one last report when stopped', async () => {
    const { shared, calls } = budgets(() => 0);
    shared.start();
    shared.recordCall('erp', POLICY);
    await shared.stop();
    expect(calls.map((c) => c.args[0])).toEqual([1]);
  });
});
