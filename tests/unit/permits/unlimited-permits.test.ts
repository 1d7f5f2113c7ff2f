import { describe, expect, it } from 'vitest';
import type { RunRequested } from '../../../src/events/schemas.js';
import { createLogger } from '../../../src/obs/logger.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { UnlimitedPermits } from '../../../src/permits/unlimited-permits.js';
import { RunDispatcher } from '../../../src/processors/run-dispatcher.js';
import type { RunExecutorDeps } from '../../../src/execution/run-executor.js';
import { ATTEMPT, INFRA_RETRY } from '../processors/fixtures.js';

const NOW = 1_800_000_000_000;

function run(id: string, tenant = 'acme'): RunRequested {
  return { runId: id, tenantId: tenant, workflow: 'wf', class: 'interactive', admittedAt: NOW, deadline: NOW + 60_000, attempt: 1, traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', input: '{}', idempotencyKey: null, dueAt: null };
}

describe('UnlimitedPermits', () => {
  it('grants every run permit at once, however many are held, and releases as a no-op', async () => {
    const permits = new UnlimitedPermits();
    const answers = await Promise.all(Array.from({ length: 1_000 }, (_, i) => permits.tryAcquire(run(`r${i}`))));
    expect(answers.every((a) => a.granted)).toBe(true);
    const first = answers[0]!;
    if (!first.granted) throw new Error('unreachable');
    await expect(first.permits.release()).resolves.toBeUndefined();
    await expect(first.permits.release()).resolves.toBeUndefined();
  });

  it('grants dependency permits at once in the shape RunExecutor takes', async () => {
    const deps: RunExecutorDeps['dependencyPermits'] = new UnlimitedPermits();
    const releases = await Promise.all(Array.from({ length: 100 }, (_, i) => deps.acquire('anthropic', run(`r${i}`))));
    await expect(Promise.all(releases.map((release) => release()))).resolves.toHaveLength(100);
  });

  it('never wakes a listener, and unsubscribing is harmless', () => {
    let woken = 0;
    const unsubscribe = new UnlimitedPermits().onWake(() => woken++);
    expect(() => unsubscribe()).not.toThrow();
    expect(woken).toBe(0);
  });

  it('leaves maxInFlight as the only bound on a dispatcher', async () => {
    const finishers: (() => void)[] = [];
    const dispatcher = new RunDispatcher({
      permits: new UnlimitedPermits(),
      execute: () => new Promise<void>((resolve) => finishers.push(resolve)),
      onFinished: () => undefined,
      deadLetter: async () => undefined,
      infraRetry: INFRA_RETRY,
      maxInFlight: 4,
      fallbackPollMs: 60_000,
      logger: createLogger('silent'),
      metrics: createMetrics(),
      now: () => NOW,
    });
    for (let i = 0; i < 10; i++) dispatcher.submit({ run: run(`r${i}`, `t${i % 3}`), source: 'p0', offset: i, context: ATTEMPT });
    await new Promise((r) => setTimeout(r, 10));
    expect(dispatcher.inFlight).toBe(4);
    expect(dispatcher.waiting).toBe(6);
    finishers.splice(0).forEach((f) => f());
    await new Promise((r) => setTimeout(r, 10));
    expect(dispatcher.inFlight).toBe(4);
    expect(dispatcher.waiting).toBe(2);
    finishers.splice(0).forEach((f) => f());
    await new Promise((r) => setTimeout(r, 10));
    finishers.splice(0).forEach((f) => f());
    await dispatcher.stop(1_000);
    expect(dispatcher.waiting).toBe(0);
  });
});
