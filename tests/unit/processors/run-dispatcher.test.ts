import { afterEach, describe, expect, it } from 'vitest';
import type { RunClass, RunRequested } from '../../../src/events/schemas.js';
import { createLogger } from '../../../src/obs/logger.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { RunDispatcher, type RunPermitAnswer, type RunPermitSource } from '../../../src/processors/run-dispatcher.js';
import { ATTEMPT } from './fixtures.js';

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

function make(permits: RunPermitSource, execute: (r: RunRequested) => Promise<unknown>, maxInFlight = 100, finished: string[] = [], now = () => NOW) {
  dispatcher = new RunDispatcher({
    permits,
    execute,
    onFinished: (t, outcome) => finished.push(`${t.run.runId}:${outcome}`),
    maxInFlight,
    fallbackPollMs: 60_000,
    logger: createLogger('silent'),
    metrics: createMetrics(),
    now,
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

  it('reports each finished run once, and a failed outcome as failed', async () => {
    const p = permitSource({ global: 10, perTenant: 10 });
    const finished: string[] = [];
    const d = make(p.source, async (r) => {
      if (r.runId === 'bad') throw new Error('outcome not recorded');
    }, 10, finished);
    d.submit({ run: run('good', 'a'), source: 'p0', offset: 0, context: ATTEMPT });
    d.submit({ run: run('bad', 'b'), source: 'p0', offset: 1, context: ATTEMPT });
    await settle();
    expect(finished.sort()).toEqual(['bad:failed', 'good:done']);
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
