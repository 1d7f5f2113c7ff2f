import { afterEach, describe, expect, it } from 'vitest';
import type { RunClass, RunRequested } from '../../../src/events/schemas.js';
import { createLogger } from '../../../src/obs/logger.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import type { RunPermitAnswer, RunPermitSource } from '../../../src/permits/run-permit-source.js';
import { RunDispatcher, type DispatchTask, type RunDispatcherDeps } from '../../../src/processors/run-dispatcher.js';
import { InfrastructureError, type RunFailure } from '../../../src/execution/run-faults.js';
import { ATTEMPT, INFRA_RETRY } from './fixtures.js';
import { histogramValue } from '../../support/metric-value.js';

const NOW = 1_800_000_000_000;

function run(id: string, tenant: string, runClass: RunClass = 'interactive', deadline = NOW + 60_000): RunRequested {
  return { runId: id, tenantId: tenant, workflow: 'wf', class: runClass, admittedAt: NOW, deadline, attempt: 1, traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', input: '{}', idempotencyKey: null, dueAt: null };
}

/** Per-tenant and global caps held in memory, with a wake-up on every release, like Redis would give. */
function permitSource(caps: { global: number; perTenant: number }) {
  const held = new Map<string, number>();
  let total = 0;
  const listeners = new Set<() => void>();
  const attempts: string[] = [];
  const source: RunPermitSource = {
    async tryAcquire(r): Promise<RunPermitAnswer> {
      attempts.push(r.runId);
      if (total >= caps.global) return { granted: false, blockedBy: 'global' };
      if ((held.get(r.tenantId) ?? 0) >= caps.perTenant) return { granted: false, blockedBy: 'tenant' };
      total++;
      held.set(r.tenantId, (held.get(r.tenantId) ?? 0) + 1);
      return {
        granted: true,
        permits: {
          release: async () => {
            total--;
            held.set(r.tenantId, held.get(r.tenantId)! - 1);
            for (const l of listeners) l();
          },
        },
      };
    },
    onWake(l) {
      listeners.add(l);
      return () => listeners.delete(l);
    },
  };
  return { source, attempts, held: () => ({ total, byTenant: Object.fromEntries(held) }) };
}

/** Runs finish when the test says so, so concurrency can be observed at every moment. */
function controllableExecutor() {
  const running = new Map<string, () => void>();
  const started: string[] = [];
  return {
    started,
    running,
    execute: (r: RunRequested) =>
      new Promise<void>((resolve) => {
        started.push(r.runId);
        running.set(r.runId, resolve);
      }),
    finish: (id: string) => {
      running.get(id)!();
      running.delete(id);
    },
  };
}

const settle = () => new Promise((r) => setTimeout(r, 10));
let dispatcher: RunDispatcher | undefined;

afterEach(async () => {
  await dispatcher?.stop(0);
  dispatcher = undefined;
});

function make(permits: RunPermitSource, execute: (r: RunRequested) => Promise<unknown>, maxInFlight = 100, finished: string[] = [], now = () => NOW, more: Partial<RunDispatcherDeps> = {}) {
  dispatcher = new RunDispatcher({
    permits,
    execute,
    onFinished: (t) => finished.push(t.run.runId),
    deadLetter: async () => undefined,
    infraRetry: INFRA_RETRY,
    maxInFlight,
    fallbackPollMs: 60_000,
    logger: createLogger('silent'),
    metrics: createMetrics(),
    now,
    random: () => 0,
    ...more,
  });
  return dispatcher;
}

describe('RunDispatcher', () => {
  it('starts a tenant\'s runs up to its cap and the rest when permits are released', async () => {
    const p = permitSource({ global: 10, perTenant: 2 });
    const ex = controllableExecutor();
    const d = make(p.source, ex.execute);
    for (const i of [1, 2, 3, 4]) d.submit({ run: run(`a${i}`, 'a'), source: 'p0', offset: i, context: ATTEMPT });
    await settle();
    expect(ex.started).toEqual(['a1', 'a2']);
    expect(d.waiting).toBe(2);
    ex.finish('a1');
    await settle();
    expect(ex.started).toEqual(['a1', 'a2', 'a3']);
  });

  it('a tenant at its cap does not hold up another tenant behind it (no head-of-line blocking)', async () => {
    const p = permitSource({ global: 10, perTenant: 2 });
    const ex = controllableExecutor();
    const d = make(p.source, ex.execute);
    for (let i = 0; i < 20; i++) d.submit({ run: run(`noisy${i}`, 'noisy'), source: 'p0', offset: i, context: ATTEMPT });
    d.submit({ run: run('quiet1', 'quiet'), source: 'p0', offset: 20, context: ATTEMPT });
    await settle();
    // The quiet tenant's run starts at once, not after the noisy tenant's capped line of 18.
    expect([...ex.started].sort()).toEqual(['noisy0', 'noisy1', 'quiet1']);
    expect(d.waiting).toBe(18);
  });

  it('blocks a whole class when the global cap is reached, and resumes on release', async () => {
    const p = permitSource({ global: 2, perTenant: 10 });
    const ex = controllableExecutor();
    const d = make(p.source, ex.execute);
    for (const t of ['a', 'b', 'c']) d.submit({ run: run(t, t), source: 'p0', offset: 0, context: ATTEMPT });
    await settle();
    expect(ex.started).toEqual(['a', 'b']);
    const triedBefore = p.attempts.length;
    await settle();
    expect(p.attempts.length).toBe(triedBefore); // blocked: no busy retrying while nothing was released
    ex.finish('a');
    await settle();
    expect(ex.started).toEqual(['a', 'b', 'c']);
  });

  it('never runs more than maxInFlight at once in this instance', async () => {
    const p = permitSource({ global: 100, perTenant: 100 });
    const ex = controllableExecutor();
    const d = make(p.source, ex.execute, 3);
    for (let i = 0; i < 10; i++) d.submit({ run: run(`r${i}`, `t${i}`), source: 'p0', offset: i, context: ATTEMPT });
    await settle();
    expect(ex.running.size).toBe(3);
    expect(d.inFlight).toBe(3);
  });

  it('hands an expired run to the executor without taking permits', async () => {
    const p = permitSource({ global: 0, perTenant: 0 });
    const ex = controllableExecutor();
    const d = make(p.source, ex.execute);
    d.submit({ run: run('late', 'a', 'interactive', NOW - 1), source: 'p0', offset: 0, context: ATTEMPT });
    await settle();
    expect(ex.started).toEqual(['late']);
    expect(p.attempts).toEqual([]);
  });

  it('ends a run whose deadline passes while it waits behind a full cap at its deadline, not when the cap frees', async () => {
    const p = permitSource({ global: 10, perTenant: 1 });
    const ex = controllableExecutor();
    let now = NOW;
    const d = make(p.source, ex.execute, 10, [], () => now);
    d.submit({ run: run('holder', 'a'), source: 'p0', offset: 0, context: ATTEMPT });
    d.submit({ run: run('waiter', 'a', 'interactive', NOW + 1_000), source: 'p0', offset: 1, context: ATTEMPT });
    d.submit({ run: run('patient', 'a'), source: 'p0', offset: 2, context: ATTEMPT });
    await settle();
    expect(ex.started).toEqual(['holder']);
    now = NOW + 1_001;
    // The tenant stays at its cap: only the sweep can find the waiter.
    await new Promise((r) => setTimeout(r, 250));
    expect(ex.started).toEqual(['holder', 'waiter']);
    expect(d.waiting).toBe(1);
    expect(p.attempts.filter((id) => id === 'waiter')).toHaveLength(1);
  });

  it('reports each finished run once, and gives its permits back', async () => {
    const p = permitSource({ global: 10, perTenant: 10 });
    const finished: string[] = [];
    const d = make(p.source, async () => undefined, 10, finished);
    d.submit({ run: run('one', 'a'), source: 'p0', offset: 0, context: ATTEMPT });
    d.submit({ run: run('two', 'b'), source: 'p0', offset: 1, context: ATTEMPT });
    await settle();
    expect(finished.sort()).toEqual(['one', 'two']);
    expect(p.held().total).toBe(0);
  });

  it('forgets waiting runs of revoked partitions and keeps the others', async () => {
    const p = permitSource({ global: 0, perTenant: 0 });
    const d = make(p.source, async () => undefined);
    d.submit({ run: run('x', 'a'), source: 'p0', offset: 0, context: ATTEMPT });
    d.submit({ run: run('y', 'b'), source: 'p1', offset: 0, context: ATTEMPT });
    await settle();
    expect(d.forget((s) => s === 'p0')).toBe(1);
    expect(d.waiting).toBe(1);
  });

  it('lists the runs in line for their permits with the scopes each needs, since it was queued, and no longer once they start', async () => {
    const p = permitSource({ global: 1, perTenant: 10 });
    const ex = controllableExecutor();
    let now = NOW;
    const d = make(p.source, ex.execute, 100, [], () => now);
    d.submit({ run: run('first', 'a'), source: 'p0', offset: 0, context: ATTEMPT });
    now += 1_000;
    d.submit({ run: run('second', 'a'), source: 'p0', offset: 1, context: ATTEMPT });
    now += 1_000;
    d.submit({ run: run('third', 'b', 'batch'), source: 'p0', offset: 2, context: ATTEMPT });
    await settle();
    expect(ex.started).toEqual(['first']);
    expect([...d.permitWaiters()]).toEqual([
      { scopes: ['global', 'tenant:a', 'workflow:wf'], since: NOW + 1_000 },
      { scopes: ['global', 'class:batch', 'tenant:b', 'workflow:wf'], since: NOW + 2_000 },
    ]);
    ex.finish('first');
    await settle();
    expect([...d.permitWaiters()].map((w) => w.since)).toEqual([NOW + 2_000]);
  });

  it('still lists a run while its permits are being asked for, out of the line meanwhile', async () => {
    let answer: (a: RunPermitAnswer) => void = () => undefined;
    const asked: RunPermitSource = { tryAcquire: () => new Promise((resolve) => (answer = resolve)), onWake: () => () => undefined };
    const d = make(asked, async () => undefined);
    d.submit({ run: run('r', 'a'), source: 'p0', offset: 0, context: ATTEMPT });
    await settle();
    expect([...d.permitWaiters()]).toEqual([{ scopes: ['global', 'tenant:a', 'workflow:wf'], since: NOW }]);
    answer({ granted: false, blockedBy: 'tenant' });
    await settle();
    expect([...d.permitWaiters()]).toEqual([{ scopes: ['global', 'tenant:a', 'workflow:wf'], since: NOW }]);
  });

  it('stop() waits for running work within the grace period and reports what is left', async () => {
    const p = permitSource({ global: 10, perTenant: 10 });
    const ex = controllableExecutor();
    const d = make(p.source, ex.execute);
    d.submit({ run: run('slow', 'a'), source: 'p0', offset: 0, context: ATTEMPT });
    await settle();
    expect(await d.stop(20)).toBe(1);
    dispatcher = undefined;
  });
});

/** Waits until `check` holds (real timers: backoffs in these tests are a few ms), bounded. */
async function until(check: () => boolean, what: string, timeoutMs = 2_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** A dead-letter sink that records what it was asked to end, failing its first `failures` calls (Kafka down). */
function deadLetterSink(failures = 0) {
  const calls: { runId: string; failure: RunFailure }[] = [];
  let left = failures;
  return {
    calls,
    deadLetter: async (task: DispatchTask, failure: RunFailure) => {
      calls.push({ runId: task.run.runId, failure });
      if (left-- > 0) throw new Error('KafkaJSConnectionError: Connection error: connect ECONNREFUSED');
    },
  };
}

const redisDown = () => new InfrastructureError('breaker_admission', 'anthropic', new Error('Connection is closed.'));

describe('RunDispatcher when the infrastructure fails (no run waits forever)', () => {
  it('tries an attempt that failed on the infrastructure again after a backoff, and records its outcome once', async () => {
    const p = permitSource({ global: 10, perTenant: 10 });
    const finished: string[] = [];
    const sink = deadLetterSink();
    let calls = 0;
    const d = make(p.source, async () => {
      if (++calls === 1) throw redisDown();
    }, 10, finished, () => NOW, { deadLetter: sink.deadLetter });
    d.submit({ run: run('blip', 'a'), source: 'p0', offset: 0, context: ATTEMPT });
    await until(() => finished.length > 0, 'the run to finish');
    expect(calls).toBe(2);
    expect(finished).toEqual(['blip']);
    expect(sink.calls).toEqual([]);
    expect(p.held().total).toBe(0);
    expect(d.waiting).toBe(0);
  });

  it('dead-letters the run after infraRetry.maxAttempts failed attempts, naming the failing operation', async () => {
    const p = permitSource({ global: 10, perTenant: 10 });
    const finished: string[] = [];
    const sink = deadLetterSink();
    const metrics = createMetrics();
    let calls = 0;
    const d = make(p.source, async () => {
      calls++;
      throw redisDown();
    }, 10, finished, () => NOW, { deadLetter: sink.deadLetter, metrics });
    d.submit({ run: run('stuck', 'a'), source: 'p0', offset: 0, context: ATTEMPT });
    await until(() => finished.length > 0, 'the run to be dead-lettered');
    expect(calls).toBe(INFRA_RETRY.maxAttempts);
    expect(finished).toEqual(['stuck']);
    expect(sink.calls).toHaveLength(1);
    expect(sink.calls[0]!.failure).toEqual({
      reason: 'infrastructure_error',
      code: 'infrastructure_error',
      message: 'gave up after 3 failed attempts: asking the shared breaker for anthropic (Redis) failed: Connection is closed.',
      retryable: true,
    });
    const counted = (await metrics.registry.getSingleMetricAsString('sluice_processor_infra_failures_total')).split('\n').filter((l) => !l.startsWith('#'));
    expect(counted.sort()).toEqual([
      'sluice_processor_infra_failures_total{operation="breaker_admission",decision="dead_letter"} 1',
      'sluice_processor_infra_failures_total{operation="breaker_admission",decision="retry"} 2',
    ]);
  });

  it('treats any other error escaping an attempt (a processor fault) the same way', async () => {
    const sink = deadLetterSink();
    const finished: string[] = [];
    make(permitSource({ global: 10, perTenant: 10 }).source, async () => {
      throw new RangeError('step index out of range');
    }, 10, finished, () => NOW, { deadLetter: sink.deadLetter }).submit({ run: run('bug', 'a'), source: 'p0', offset: 0, context: ATTEMPT });
    await until(() => finished.length > 0, 'the run to be dead-lettered');
    expect(sink.calls[0]!.failure.message).toBe('gave up after 3 failed attempts: running the attempt (processor) failed: step index out of range');
  });

  it('a run-permit request that fails (Redis down) backs off and asks again; the run is not lost', async () => {
    const p = permitSource({ global: 10, perTenant: 10 });
    let failures = 1;
    const flaky: RunPermitSource = { ...p.source, tryAcquire: async (r) => (failures-- > 0 ? Promise.reject(new Error('Command timed out')) : p.source.tryAcquire(r)) };
    const ex = controllableExecutor();
    const d = make(flaky, ex.execute);
    d.submit({ run: run('r', 'a'), source: 'p0', offset: 0, context: ATTEMPT });
    await until(() => ex.started.length > 0, 'the run to start');
    expect(ex.started).toEqual(['r']);
    expect(d.waiting).toBe(0);
  });

  it('dead-letters a run whose permits could never be asked for, without running it', async () => {
    const down: RunPermitSource = { tryAcquire: async () => Promise.reject(new Error('Command timed out')), onWake: () => () => undefined };
    const sink = deadLetterSink();
    const finished: string[] = [];
    const ex = controllableExecutor();
    make(down, ex.execute, 10, finished, () => NOW, { deadLetter: sink.deadLetter }).submit({ run: run('r', 'a'), source: 'p0', offset: 0, context: ATTEMPT });
    await until(() => finished.length > 0, 'the run to be dead-lettered');
    expect(ex.started).toEqual([]);
    expect(sink.calls[0]!.failure.message).toBe('gave up after 3 failed attempts: taking run permits (Redis) failed: Command timed out');
  });

  it('keeps trying to dead-letter while that fails (Kafka down), and reports the run finished only once it succeeded', async () => {
    const sink = deadLetterSink(4);
    const finished: string[] = [];
    const d = make(permitSource({ global: 10, perTenant: 10 }).source, async () => {
      throw redisDown();
    }, 10, finished, () => NOW, { deadLetter: sink.deadLetter });
    d.submit({ run: run('r', 'a'), source: 'p0', offset: 0, context: ATTEMPT });
    await until(() => finished.length > 0, 'the run to be dead-lettered');
    expect(sink.calls).toHaveLength(5);
    expect(finished).toEqual(['r']);
    expect(d.inFlight).toBe(0);
  });

  it('dead-letters a run of an unknown tenant or workflow at once, without asking for permits or running it', async () => {
    const p = permitSource({ global: 10, perTenant: 10 });
    const ex = controllableExecutor();
    const sink = deadLetterSink();
    const finished: string[] = [];
    const gone: RunFailure = { reason: 'unknown_tenant', code: 'unknown_tenant', message: 'tenant "gone" is not configured on this processor', retryable: false };
    const d = make(p.source, ex.execute, 10, finished, () => NOW, { deadLetter: sink.deadLetter, unconfigured: (r) => (r.tenantId === 'gone' ? gone : undefined) });
    d.submit({ run: run('orphan', 'gone'), source: 'p0', offset: 0, context: ATTEMPT });
    d.submit({ run: run('fine', 'a'), source: 'p0', offset: 1, context: ATTEMPT });
    await until(() => finished.length > 0, 'the orphan to be dead-lettered');
    expect(sink.calls).toEqual([{ runId: 'orphan', failure: gone }]);
    expect(p.attempts).toEqual(['fine']);
    expect(ex.started).toEqual(['fine']);
    expect(finished).toEqual(['orphan']);
  });

  it('stop() drops runs backing off (redelivered from the uncommitted offset) and tries nothing more', async () => {
    let calls = 0;
    const d = make(permitSource({ global: 10, perTenant: 10 }).source, async () => {
      calls++;
      throw redisDown();
    }, 10, [], () => NOW, { infraRetry: { maxAttempts: 3, baseMs: 50, capMs: 50 }, random: () => 0.99 });
    d.submit({ run: run('r', 'a'), source: 'p0', offset: 0, context: ATTEMPT });
    await until(() => calls === 1 && d.waiting === 1, 'the first failure');
    expect(await d.stop(0)).toBe(0);
    dispatcher = undefined;
    await new Promise((r) => setTimeout(r, 80));
    expect(calls).toBe(1);
  });

  it('forget() drops a revoked partition\'s runs backing off and gives up dead-lettering them', async () => {
    const sink = deadLetterSink(Number.MAX_SAFE_INTEGER);
    const finished: string[] = [];
    let calls = 0;
    const d = make(permitSource({ global: 10, perTenant: 10 }).source, async (r) => {
      calls++;
      if (r.runId === 'b') throw redisDown();
    }, 10, finished, () => NOW, { deadLetter: sink.deadLetter, infraRetry: { maxAttempts: 1, baseMs: 5, capMs: 5 }, unconfigured: (r) => (r.tenantId === 'gone' ? { reason: 'unknown_tenant', code: 'unknown_tenant', message: 'x', retryable: false } : undefined) });
    d.submit({ run: run('a', 'gone'), source: 'p0', offset: 0, context: ATTEMPT });
    d.submit({ run: run('b', 'b'), source: 'p1', offset: 0, context: ATTEMPT });
    await until(() => sink.calls.some((c) => c.runId === 'a') && sink.calls.some((c) => c.runId === 'b'), 'both dead-letters to be tried');
    expect(d.inFlight).toBe(2);
    d.forget(() => true);
    await until(() => d.inFlight === 0, 'the dead-letter loops to give up');
    expect(finished).toEqual([]);
    expect(calls).toBe(1);
  });

  it('every run ends, whatever fails and how often: none stays queued or running', async () => {
    let seed = 7;
    const random = () => ((seed = (seed * 16807) % 2147483647) / 2147483647);
    const p = permitSource({ global: 5, perTenant: 2 });
    const flaky: RunPermitSource = { ...p.source, tryAcquire: async (r) => (random() < 0.3 ? Promise.reject(new Error('Command timed out')) : p.source.tryAcquire(r)) };
    const sink = { calls: 0, deadLetter: async () => (++sink.calls, random() < 0.5 ? Promise.reject(new Error('Kafka down')) : undefined) };
    const finished: string[] = [];
    const d = make(flaky, async () => {
      if (random() < 0.5) throw redisDown();
    }, 4, finished, () => NOW, { deadLetter: sink.deadLetter });
    for (let i = 0; i < 40; i++) d.submit({ run: run(`r${i}`, `t${i % 5}`), source: 'p0', offset: i, context: ATTEMPT });
    await until(() => finished.length === 40, 'every run to end', 10_000);
    expect(new Set(finished).size).toBe(40);
    expect(d.waiting).toBe(0);
    expect(d.inFlight).toBe(0);
    expect(p.held().total).toBe(0);
  });
});

describe('RunDispatcher measures the wait since admission', () => {
  it('from admission to the start, time in Kafka included, next to the wait inside this processor', async () => {
    let now = NOW;
    const metrics = createMetrics();
    const p = permitSource({ global: 10, perTenant: 1 });
    const ex = controllableExecutor();
    // Admitted 4 s before this processor read it; the second waits 2 s more here for its tenant's permit.
    const admitted = NOW - 4_000;
    const d = make(p.source, ex.execute, 10, [], () => now, { metrics });
    d.submit({ run: { ...run('first', 'a'), admittedAt: admitted }, source: 'p0', offset: 0, context: ATTEMPT });
    d.submit({ run: { ...run('second', 'a', 'batch'), admittedAt: admitted }, source: 'p0', offset: 1, context: ATTEMPT });
    await settle();
    now += 2_000;
    ex.finish('first');
    await settle();
    expect(ex.started).toEqual(['first', 'second']);
    expect(await histogramValue(metrics.runWaitSinceAdmission, { class: 'interactive' })).toEqual({ count: 1, sum: 4 });
    expect(await histogramValue(metrics.runWaitSinceAdmission, { class: 'batch' })).toEqual({ count: 1, sum: 6 });
    expect(await histogramValue(metrics.queueWait, { class: 'batch' })).toEqual({ count: 1, sum: 2 });
  });

  it('not for a run-level retry, nor again when an attempt is repeated after an infrastructure failure', async () => {
    const metrics = createMetrics();
    let calls = 0;
    const finished: string[] = [];
    const d = make(permitSource({ global: 10, perTenant: 10 }).source, async (r) => {
      if (r.runId === 'blip' && ++calls === 1) throw redisDown();
    }, 10, finished, () => NOW, { metrics });
    d.submit({ run: { ...run('retry', 'a'), attempt: 2, dueAt: NOW - 100 }, source: 'p0', offset: 0, context: { ...ATTEMPT, priorFailures: 1 } });
    d.submit({ run: run('blip', 'b'), source: 'p0', offset: 1, context: ATTEMPT });
    await until(() => finished.length === 2, 'both runs to finish');
    expect(calls).toBe(2);
    expect((await histogramValue(metrics.runWaitSinceAdmission, { class: 'interactive' })).count).toBe(1);
    // The wait inside the processor is still measured at every start.
    expect((await histogramValue(metrics.queueWait, { class: 'interactive' })).count).toBe(3);
  });

  it('a DLQ replay re-admits its run: measured from its new admission time', async () => {
    const metrics = createMetrics();
    const finished: string[] = [];
    const d = make(permitSource({ global: 10, perTenant: 10 }).source, async () => undefined, 10, finished, () => NOW, { metrics });
    d.submit({ run: { ...run('replayed', 'a'), attempt: 3, admittedAt: NOW - 1_500, dueAt: null }, source: 'p0', offset: 0, context: ATTEMPT });
    await until(() => finished.length === 1, 'the run to finish');
    expect(await histogramValue(metrics.runWaitSinceAdmission, { class: 'interactive' })).toEqual({ count: 1, sum: 1.5 });
  });
});
