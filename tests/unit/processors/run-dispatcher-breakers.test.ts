import { afterEach, describe, expect, it } from 'vitest';
import { gateRun, type BreakerView } from '../../../src/breakers/breaker-gate.js';
import type { RunClass, RunRequested } from '../../../src/events/schemas.js';
import { createLogger } from '../../../src/obs/logger.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import type { RunPermitAnswer, RunPermitSource } from '../../../src/permits/run-permit-source.js';
import type { DispatchBreakers } from '../../../src/processors/breaker-holds.js';
import { RunDispatcher, type DispatchTask, type RunDispatcherDeps } from '../../../src/processors/run-dispatcher.js';
import { isExpired, MIN_USEFUL_CALL_MS } from '../../../src/runs/deadline.js';
import { ATTEMPT, INFRA_RETRY } from './fixtures.js';

const NOW = 1_800_000_000_000;
const FAR = NOW + 3_600_000;
const POLL_MS = 5;

/** Workflows of these tests and the dependencies they call. */
const NEEDS: Record<string, string[]> = { chat: ['llm'], lookup: ['llm', 'tool'], plain: [] };

/** By default a deadline far enough out that an interactive run can wait for the breakers set below. */
function run(id: string, tenant: string, workflow = 'chat', runClass: RunClass = 'interactive', deadline = FAR + 60_000): RunRequested {
  return { runId: id, tenantId: tenant, workflow, class: runClass, admittedAt: NOW, deadline, attempt: 1, traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', input: '{}', idempotencyKey: null, dueAt: null };
}

const task = (r: RunRequested, source = 'p0', offset = 0): DispatchTask => ({ run: r, source, offset, context: ATTEMPT });

/** Held runs summed per dependency. */
function heldByDependency(d: RunDispatcher): Map<string, number> {
  const sums = new Map<string, number>();
  for (const h of d.heldCounts().values()) sums.set(h.dependency, (sums.get(h.dependency) ?? 0) + h.runs);
  return sums;
}

/**
 * Breakers the test sets by hand. The decision itself is the real `gateRun`, so the dispatcher is
 * exercised against the rules it will meet in production; `gated` keeps the probing counts each
 * decision was made with, so reservations can be checked at the moment they matter.
 */
function fakeBreakers(clock: () => number, probes: Record<string, number> = {}) {
  const views = new Map<string, BreakerView>();
  const listeners = new Set<() => void>();
  const gated: { runId: string; probing: Record<string, number> }[] = [];
  const breakers: DispatchBreakers = {
    gate(r, probing) {
      gated.push({ runId: r.runId, probing: Object.fromEntries(probing) });
      return gateRun({ runClass: r.class, deadline: r.deadline, needed: NEEDS[r.workflow] ?? [], views, now: clock(), minCallMs: MIN_USEFUL_CALL_MS, probeRoom: (d) => (probing.get(d) ?? 0) < (probes[d] ?? 2) });
    },
    probedBy: (r) => (NEEDS[r.workflow] ?? []).filter((d) => (views.get(d)?.state ?? 'closed') !== 'closed'),
    onChange(l) {
      listeners.add(l);
      return () => listeners.delete(l);
    },
  };
  return {
    breakers,
    listeners,
    gated,
    set(name: string, state: BreakerView['state'], retryAt?: number) {
      views.set(name, { name, state, ...(retryAt !== undefined ? { retryAt } : {}) });
    },
    /** What the board does on a transition: tell every subscriber. */
    changed() {
      for (const l of [...listeners]) l();
    },
    gatesOf: (runId: string) => gated.filter((g) => g.runId === runId).length,
  };
}

/** Unlimited permits unless a tenant is refused; every release wakes dispatchers, as Redis pub/sub does. */
function permitSource() {
  const listeners = new Set<() => void>();
  const attempts: string[] = [];
  const refuse = new Map<string, 'global' | 'class' | 'tenant' | 'workflow'>();
  /** Runs whose next permit request fails outright, as a Redis timeout makes it. */
  const failNext = new Set<string>();
  let pending = 0;
  let maxPending = 0;
  let granted = 0;
  let released = 0;
  const source: RunPermitSource = {
    async tryAcquire(r): Promise<RunPermitAnswer> {
      attempts.push(r.runId);
      pending++;
      maxPending = Math.max(maxPending, pending);
      // A real round trip: the answers of one batch are all outstanding together.
      await new Promise((res) => setTimeout(res, 1));
      pending--;
      if (failNext.delete(r.runId)) throw new Error('Command timed out');
      const blockedBy = refuse.get(r.tenantId);
      if (blockedBy) return { granted: false, blockedBy };
      granted++;
      return {
        granted: true,
        permits: {
          release: async () => {
            released++;
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
  return { source, attempts, refuse, failNext, maxPending: () => maxPending, counts: () => ({ granted, released }), wake: () => listeners.forEach((l) => l()) };
}

/** Runs finish when the test says so; an expired run is recorded as such, as the executor does. */
function executor(clock: () => number) {
  const running = new Map<string, () => void>();
  const started: string[] = [];
  const expired: string[] = [];
  return {
    started,
    expired,
    running,
    execute: (r: RunRequested) => {
      if (isExpired(r.deadline, clock())) {
        expired.push(r.runId);
        return Promise.resolve();
      }
      return new Promise<void>((resolve) => {
        started.push(r.runId);
        running.set(r.runId, resolve);
      });
    },
    finish(id: string) {
      running.get(id)!();
      running.delete(id);
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const settle = () => sleep(25);

/** Polls a condition: timing on a busy CI machine is not exact, only bounded. */
async function until(check: () => boolean, what: string, timeoutMs = 2_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

let dispatchers: RunDispatcher[] = [];

afterEach(async () => {
  await Promise.all(dispatchers.map((d) => d.stop(0)));
  dispatchers = [];
});

function setup(opts: { probes?: Record<string, number>; pollMs?: number; maxInFlight?: number } = {}) {
  let now = NOW;
  const clock = () => now;
  const b = fakeBreakers(clock, opts.probes);
  const p = permitSource();
  const ex = executor(clock);
  const held: { runId: string; dependency: string; until: number }[] = [];
  const finished: string[] = [];
  let rounds = 0;
  const heldAtRound: number[] = [];
  const deps: RunDispatcherDeps = {
    permits: p.source,
    execute: ex.execute,
    onFinished: (t) => finished.push(t.run.runId),
    deadLetter: async () => undefined,
    infraRetry: INFRA_RETRY,
    maxInFlight: opts.maxInFlight ?? 100,
    breakers: b.breakers,
    onHeld: (t, dependency, untilMs) => held.push({ runId: t.run.runId, dependency, until: untilMs }),
    onRound: () => {
      rounds++;
      heldAtRound.push(d.heldFrom('p0'));
    },
    fallbackPollMs: opts.pollMs ?? POLL_MS,
    logger: createLogger('silent'),
    metrics: createMetrics(),
    now: clock,
  };
  const d = new RunDispatcher(deps);
  dispatchers.push(d);
  return {
    d,
    b,
    p,
    ex,
    held,
    finished,
    rounds: () => rounds,
    heldAtRound,
    advance: (ms: number) => void (now += ms),
  };
}

describe('RunDispatcher with breakers: holding', () => {
  it('does not execute or ask permits for runs whose dependency is open, and they block neither their tenant nor others', async () => {
    const s = setup();
    s.b.set('llm', 'open', FAR);
    s.d.submit(task(run('a-chat', 'a', 'chat')));
    s.d.submit(task(run('a-plain', 'a', 'plain')));
    s.d.submit(task(run('b-lookup', 'b', 'lookup')));
    s.d.submit(task(run('b-plain', 'b', 'plain')));
    s.d.submit(task(run('c-batch', 'c', 'chat', 'batch')));
    s.d.submit(task(run('c-plain', 'c', 'plain', 'batch')));
    await settle();
    // a-plain sits behind a-chat in tenant a's line: the held head must not stall it.
    expect([...s.ex.started].sort()).toEqual(['a-plain', 'b-plain', 'c-plain']);
    expect(s.p.attempts).not.toContain('a-chat');
    expect(s.p.attempts).not.toContain('b-lookup');
    expect(s.p.attempts).not.toContain('c-batch');
    expect(s.d.waiting).toBe(3);
    expect(s.d.inFlight).toBe(3);
  });

  it('held runs take no room from maxInFlight', async () => {
    const s = setup({ maxInFlight: 1 });
    s.b.set('llm', 'open', FAR);
    for (let i = 0; i < 20; i++) s.d.submit(task(run(`held${i}`, `t${i}`)));
    s.d.submit(task(run('free', 'z', 'plain')));
    await settle();
    expect(s.ex.started).toEqual(['free']);
    expect(s.d.waiting).toBe(20);
  });

  it('announces each hold once, with the dependency and until, however many polls look at it again', async () => {
    const s = setup({ pollMs: POLL_MS });
    s.b.set('llm', 'open', FAR);
    s.b.set('tool', 'open', FAR + 1);
    s.d.submit(task(run('a1', 'a', 'chat')));
    s.d.submit(task(run('a2', 'a', 'lookup', 'batch')));
    s.d.submit(task(run('b1', 'b', 'chat', 'batch')));
    await until(() => s.b.gatesOf('a1') >= 8 && s.b.gatesOf('b1') >= 8, 'several polls');
    s.b.changed(); // a change that changes nothing for them: still held, still not re-announced
    await settle();
    expect(s.held.sort((x, y) => x.runId.localeCompare(y.runId))).toEqual([
      { runId: 'a1', dependency: 'llm', until: FAR },
      { runId: 'a2', dependency: 'tool', until: FAR + 1 },
      { runId: 'b1', dependency: 'llm', until: FAR },
    ]);
    expect(s.ex.started).toEqual([]);
    expect(s.p.attempts).toEqual([]);
  });

  it('on a breaker change, held runs are dispatched in their original order without waiting for the poll', async () => {
    const s = setup({ pollMs: 60_000 });
    s.b.set('llm', 'open', FAR);
    for (const id of ['a1', 'a2', 'b1', 'a3', 'b2', 'c1']) s.d.submit(task(run(id, id[0]!)));
    await settle();
    expect(s.held.map((h) => h.runId).sort()).toEqual(['a1', 'a2', 'a3', 'b1', 'b2', 'c1']);
    s.b.set('llm', 'closed');
    s.b.changed();
    await until(() => s.ex.started.length === 6, 'all six to start');
    const order = s.ex.started;
    // Each tenant's runs keep their order; tenants still take turns (b1 does not wait behind all of a).
    expect(order.filter((id) => id.startsWith('a'))).toEqual(['a1', 'a2', 'a3']);
    expect(order.filter((id) => id.startsWith('b'))).toEqual(['b1', 'b2']);
    expect(order[0]).toBe('a1');
    expect(order.indexOf('b1')).toBeLessThan(order.indexOf('a2'));
    expect(order.indexOf('c1')).toBeLessThan(order.indexOf('a3'));
    expect(s.d.waiting).toBe(0);
  });

  it('held runs come back on the periodic poll when a change announcement was missed', async () => {
    const s = setup({ pollMs: 20 });
    s.b.set('llm', 'open', FAR);
    s.d.submit(task(run('a1', 'a')));
    await settle();
    expect(s.ex.started).toEqual([]);
    s.b.set('llm', 'closed'); // no changed(): the announcement was lost
    await until(() => s.ex.started.length === 1, 'the poll to release a1');
    expect(s.ex.started).toEqual(['a1']);
  });

  it('a held batch run whose deadline passes is handed to the executor, which records it expired without permits', async () => {
    const s = setup({ pollMs: POLL_MS });
    s.b.set('llm', 'open', FAR);
    s.d.submit(task(run('late-batch', 'a', 'chat', 'batch', NOW + 1_000)));
    s.d.submit(task(run('late-interactive', 'b', 'chat', 'interactive', FAR + MIN_USEFUL_CALL_MS)));
    await settle();
    expect(s.held.map((h) => h.runId)).toEqual(['late-batch', 'late-interactive']);
    s.advance(1_000);
    await until(() => s.ex.expired.length === 1, 'the batch run to expire');
    expect(s.ex.expired).toEqual(['late-batch']);
    s.advance(FAR + MIN_USEFUL_CALL_MS - NOW - 1_000);
    await until(() => s.ex.expired.length === 2, 'the interactive run to expire');
    expect(s.ex.expired).toEqual(['late-batch', 'late-interactive']);
    expect(s.p.attempts).toEqual([]);
    expect(s.finished.sort()).toEqual(['late-batch', 'late-interactive']);
    expect(s.d.waiting).toBe(0);
    expect(heldByDependency(s.d).size).toBe(0);
  });

  it('a held run whose deadline passes expires then, not at the next poll or breaker change', async () => {
    const s = setup({ pollMs: 60_000 });
    s.b.set('llm', 'open', FAR);
    s.d.submit(task(run('held', 'a', 'chat', 'batch', NOW + 1_000)));
    await settle();
    expect(s.held.map((h) => h.runId)).toEqual(['held']);
    s.advance(1_000);
    // No poll for a minute and no breaker change: only the deadline sweep can find it.
    await until(() => s.ex.expired.length === 1, 'the held run to expire');
    expect(s.ex.expired).toEqual(['held']);
    expect(s.d.waiting).toBe(0);
    expect(s.p.attempts).toEqual([]);
  });

  it('an interactive run that cannot wait for the probe goes on (to its fallback) instead of being held', async () => {
    const s = setup();
    s.b.set('llm', 'open', NOW + 10_000);
    s.d.submit(task(run('hurry', 'a', 'chat', 'interactive', NOW + 10_000 + MIN_USEFUL_CALL_MS - 1)));
    s.d.submit(task(run('patient', 'b', 'chat', 'interactive', NOW + 10_000 + MIN_USEFUL_CALL_MS)));
    await settle();
    expect(s.ex.started).toEqual(['hurry']);
    expect(s.held.map((h) => h.runId)).toEqual(['patient']);
  });
});

describe('RunDispatcher with breakers: probing', () => {
  it('starts only halfOpenProbes runs of a half-open dependency, even when many are released in one batch', async () => {
    const s = setup({ pollMs: 60_000, probes: { llm: 2 } });
    s.b.set('llm', 'open', FAR);
    for (let i = 0; i < 10; i++) s.d.submit(task(run(`r${i}`, `t${i}`)));
    s.d.submit(task(run('free', 'tz', 'plain')));
    await settle();
    expect(s.ex.started).toEqual(['free']);
    s.b.set('llm', 'half_open');
    s.b.changed();
    await settle();
    expect(s.ex.started).toEqual(['free', 'r0', 'r1']);
    // Both probes were asked for together: the limit held within one batch, not by luck of timing.
    expect(s.p.maxPending()).toBe(2);
    expect(s.p.attempts).toEqual(['free', 'r0', 'r1']);
    expect(heldByDependency(s.d)).toEqual(new Map([['llm', 8]]));
    // The third run was judged with both probes already counted.
    expect(s.b.gated.filter((g) => g.runId === 'r2').at(-1)!.probing).toEqual({ llm: 2 });
  });

  it('bounds fresh submissions the same way, and an open breaker past its retryAt is probed like a half-open one', async () => {
    const s = setup({ pollMs: POLL_MS, probes: { llm: 1 } });
    s.b.set('llm', 'open', NOW - 1);
    for (let i = 0; i < 5; i++) s.d.submit(task(run(`r${i}`, `t${i}`, 'chat', i % 2 === 0 ? 'interactive' : 'batch')));
    await settle();
    await settle();
    expect(s.ex.started).toEqual(['r0']);
    expect(s.d.waiting).toBe(4);
    // Waiting for a probe slot is a hold too, announced once, until "now" (look again soon).
    expect(s.held).toEqual([
      { runId: 'r2', dependency: 'llm', until: NOW },
      { runId: 'r4', dependency: 'llm', until: NOW },
      { runId: 'r1', dependency: 'llm', until: NOW },
      { runId: 'r3', dependency: 'llm', until: NOW },
    ]);
  });

  it('counts probes per dependency: a run needing two probed dependencies takes one of each', async () => {
    const s = setup({ pollMs: 60_000, probes: { llm: 2, tool: 1 } });
    s.b.set('llm', 'half_open');
    s.b.set('tool', 'half_open');
    s.d.submit(task(run('lookup1', 'a', 'lookup')));
    await settle();
    s.d.submit(task(run('lookup2', 'b', 'lookup')));
    s.d.submit(task(run('chat1', 'c', 'chat')));
    s.d.submit(task(run('chat2', 'd', 'chat')));
    await settle();
    // lookup1 holds the one tool probe and one of two llm probes: lookup2 waits on tool, chat1 takes the last llm one.
    expect(s.ex.started).toEqual(['lookup1', 'chat1']);
    expect(heldByDependency(s.d)).toEqual(new Map([['tool', 1], ['llm', 1]]));
  });

  it('runs that need nothing probed are not limited by the probe count', async () => {
    const s = setup({ probes: { llm: 1 } });
    s.b.set('llm', 'half_open');
    for (let i = 0; i < 5; i++) s.d.submit(task(run(`p${i}`, `t${i}`, 'plain')));
    s.d.submit(task(run('c0', 'tc')));
    s.d.submit(task(run('c1', 'td')));
    await settle();
    expect([...s.ex.started].sort()).toEqual(['c0', 'p0', 'p1', 'p2', 'p3', 'p4']);
  });

  it('gives a probe back when the run’s permits are refused, so a run of another tenant can probe', async () => {
    const s = setup({ pollMs: POLL_MS, probes: { llm: 1 } });
    s.b.set('llm', 'half_open');
    s.p.refuse.set('a', 'tenant');
    s.d.submit(task(run('a1', 'a')));
    s.d.submit(task(run('b1', 'b')));
    await until(() => s.ex.started.includes('b1'), 'b1 to probe');
    expect(s.ex.started).toEqual(['b1']);
    // With b1 probing, a1 waits for the probe, not only for its permits.
    s.p.refuse.delete('a');
    await settle();
    expect(s.ex.started).toEqual(['b1']);
    s.ex.finish('b1');
    await until(() => s.ex.started.includes('a1'), 'a1 to probe after b1');
  });

  it('gives probes back on every kind of refusal, also when both runs were in one batch', async () => {
    for (const blockedBy of ['global', 'class', 'tenant', 'workflow'] as const) {
      const s = setup({ pollMs: POLL_MS, probes: { llm: 1 } });
      s.b.set('llm', 'open', FAR);
      s.d.submit(task(run('a1', 'a')));
      s.d.submit(task(run('b1', 'b')));
      await settle();
      s.p.refuse.set('a', blockedBy);
      s.b.set('llm', 'half_open');
      s.b.changed();
      await sleep(30);
      s.p.refuse.delete('a');
      // A leaked reservation would leave llm "full" for good: nothing would ever start again.
      await until(() => s.ex.started.length >= 1, `a probe to start after a ${blockedBy} refusal`);
      expect(s.ex.started.length, blockedBy).toBe(1);
      expect(s.b.gated.at(-1)!.probing, blockedBy).toEqual({ llm: 1 });
      await s.d.stop(0);
    }
  });

  it('gives a probe back when the run finishes, so the next waiting run can probe', async () => {
    const s = setup({ pollMs: 60_000, probes: { llm: 2 } });
    s.b.set('llm', 'half_open');
    for (let i = 0; i < 5; i++) s.d.submit(task(run(`r${i}`, `t${i}`)));
    await settle();
    expect(s.ex.started).toEqual(['r0', 'r1']);
    s.ex.finish('r0');
    await until(() => s.ex.started.length === 3, 'r2 after r0');
    expect(s.ex.started).toEqual(['r0', 'r1', 'r2']);
    s.ex.finish('r1');
    s.ex.finish('r2');
    await until(() => s.ex.started.length === 5, 'r3 and r4');
    const maxProbing = Math.max(...s.b.gated.map((g) => g.probing.llm ?? 0));
    expect(maxProbing).toBe(2);
    s.ex.finish('r3');
    s.ex.finish('r4');
    await settle();
    expect(s.finished.sort()).toEqual(['r0', 'r1', 'r2', 'r3', 'r4']);
    // Every reservation was given back: a new run is judged with nobody probing.
    s.d.submit(task(run('last', 'tl')));
    await settle();
    expect(s.b.gated.at(-1)).toEqual({ runId: 'last', probing: {} });
  });

  it('gives a probe back when the run fails', async () => {
    const b = fakeBreakers(() => NOW, { llm: 1 });
    b.set('llm', 'half_open');
    const p = permitSource();
    const started: string[] = [];
    const d = new RunDispatcher({
      permits: p.source,
      execute: async (r) => {
        started.push(r.runId);
        if (r.runId === 'bad') throw new Error('outcome not recorded');
      },
      onFinished: () => undefined,
      deadLetter: async () => undefined,
      // Dead-lettered at its first failure, so it is not started again within the test.
      infraRetry: { ...INFRA_RETRY, maxAttempts: 1 },
      maxInFlight: 10,
      breakers: b.breakers,
      fallbackPollMs: 60_000,
      logger: createLogger('silent'),
      metrics: createMetrics(),
      now: () => NOW,
    });
    dispatchers.push(d);
    d.submit(task(run('bad', 'a')));
    await settle();
    d.submit(task(run('next', 'b')));
    await settle();
    expect(started).toEqual(['bad', 'next']);
    expect(b.gated.find((g) => g.runId === 'next')!.probing).toEqual({});
  });

  it('a run started while its breaker was closed is no probe', async () => {
    const s = setup({ pollMs: 60_000, probes: { llm: 1 } });
    s.d.submit(task(run('early', 'a')));
    await settle();
    s.b.set('llm', 'half_open');
    s.d.submit(task(run('probe', 'b')));
    await settle();
    expect(s.ex.started).toEqual(['early', 'probe']);
  });
});

describe('RunDispatcher with breakers: accounting and revocation', () => {
  it('waiting, waitingOf, oldestWaiting, heldFrom and heldCounts include held runs', async () => {
    // No poll: a run whose permits are being asked for is momentarily in neither line, so counts are read between rounds.
    const s = setup({ pollMs: 60_000 });
    s.b.set('llm', 'open', FAR);
    s.b.set('tool', 'open', FAR + 5);
    s.p.refuse.set('z', 'tenant');
    s.d.submit(task(run('a1', 'a', 'chat'), 'p0', 1));
    s.advance(5);
    s.d.submit(task(run('b1', 'b', 'lookup', 'batch'), 'p1', 1));
    s.advance(5);
    s.d.submit(task(run('c1', 'c', 'chat'), 'p1', 2));
    s.advance(5);
    s.d.submit(task(run('z1', 'z', 'plain'), 'p0', 2)); // queued, refused permits: waiting but not held
    s.advance(5);
    s.d.submit(task(run('z2', 'z', 'plain', 'batch'), 'p0', 3));
    await settle();
    // Released and held again several times: a run keeps its place in time.
    for (let i = 0; i < 3; i++) {
      s.b.changed();
      await settle();
    }
    expect(s.b.gatesOf('a1')).toBe(4);
    expect(s.d.waiting).toBe(5);
    expect(s.d.heldFrom('p0')).toBe(1);
    expect(s.d.heldFrom('p1')).toBe(2);
    expect(s.d.heldFrom('p9')).toBe(0);
    expect(heldByDependency(s.d)).toEqual(new Map([['llm', 2], ['tool', 1]]));
    // Per dependency, tenant and class, so held runs can be summed per tenant and class across processors.
    expect([...s.d.heldCounts().values()].sort((x, y) => x.tenant.localeCompare(y.tenant))).toEqual([
      { dependency: 'llm', tenant: 'a', runClass: 'interactive', runs: 1 },
      { dependency: 'tool', tenant: 'b', runClass: 'batch', runs: 1 },
      { dependency: 'llm', tenant: 'c', runClass: 'interactive', runs: 1 },
    ]);
    expect(s.d.waitingOf('interactive')).toBe(3);
    expect(s.d.waitingOf('batch')).toBe(2);
    expect(s.d.oldestWaiting('interactive')).toBe(NOW);
    expect(s.d.oldestWaiting('batch')).toBe(NOW + 5);
  });

  it('oldestWaiting takes a queued run when it is older than every held one', async () => {
    const s = setup({ pollMs: 60_000 });
    s.b.set('llm', 'open', FAR);
    s.p.refuse.set('z', 'tenant');
    s.d.submit(task(run('z1', 'z', 'plain')));
    s.advance(10);
    s.d.submit(task(run('a1', 'a')));
    await settle();
    expect(s.d.heldFrom('p0')).toBe(1);
    expect(s.d.oldestWaiting('interactive')).toBe(NOW);
    expect(s.d.oldestWaiting('batch')).toBeUndefined();
  });

  it('forget drops held runs of revoked partitions with the queued ones, and they never run', async () => {
    const s = setup({ pollMs: 60_000 });
    s.b.set('llm', 'open', FAR);
    s.p.refuse.set('z', 'tenant');
    s.d.submit(task(run('a1', 'a'), 'p0', 1));
    s.d.submit(task(run('a2', 'a', 'chat', 'batch'), 'p0', 2));
    s.d.submit(task(run('b1', 'b'), 'p1', 1));
    s.d.submit(task(run('z1', 'z', 'plain'), 'p0', 3));
    await settle();
    expect(s.d.forget((src) => src === 'p0')).toBe(3);
    expect(s.d.waiting).toBe(1);
    expect(s.d.heldFrom('p0')).toBe(0);
    expect(s.d.heldFrom('p1')).toBe(1);
    expect(heldByDependency(s.d)).toEqual(new Map([['llm', 1]]));
    s.p.refuse.delete('z');
    s.b.set('llm', 'closed');
    s.b.changed();
    await settle();
    expect(s.ex.started).toEqual(['b1']);
  });

  it('calls onRound after each dispatch round, when the round’s holds are already counted', async () => {
    const s = setup({ pollMs: POLL_MS });
    s.b.set('llm', 'open', FAR);
    s.d.submit(task(run('a1', 'a')));
    s.d.submit(task(run('a2', 'a', 'chat', 'batch')));
    await settle();
    expect(s.rounds()).toBeGreaterThanOrEqual(2);
    // The consumer pauses a partition whose buffered work is all held: it must see the holds then.
    expect(s.heldAtRound.at(-1)).toBe(2);
    const before = s.rounds();
    await until(() => s.rounds() >= before + 3, 'polls to make more rounds');
  });

  it('stop() unsubscribes from breaker changes', async () => {
    const s = setup();
    expect(s.b.listeners.size).toBe(1);
    await s.d.stop(0);
    expect(s.b.listeners.size).toBe(0);
  });
});

/**
 * A permit request that rejects (Redis timeout, connection lost) must not lose its batch: the
 * failed run goes back to its line with its probe given back, the granted ones start.
 */
describe('RunDispatcher with breakers: a permit request that fails', () => {
  it('loses no run of the batch: the failed one is tried again and the granted one starts', async () => {
    const s = setup({ pollMs: POLL_MS });
    s.b.set('llm', 'open', FAR);
    s.d.submit(task(run('a1', 'a')));
    s.d.submit(task(run('b1', 'b')));
    await settle();
    s.p.failNext.add('a1');
    s.b.set('llm', 'closed');
    s.b.changed();
    await settle();
    // Every submitted, unfinished run is either waiting or running.
    expect(s.d.waiting + s.d.inFlight).toBe(2);
    await until(() => s.ex.started.length === 2, 'a1 and b1 to start', 1_000);
  });

  it('gives the probe back, so the half-open dependency can still be probed', async () => {
    const s = setup({ pollMs: POLL_MS, probes: { llm: 1 } });
    s.b.set('llm', 'half_open');
    s.p.failNext.add('a1');
    s.d.submit(task(run('a1', 'a')));
    await settle();
    s.d.submit(task(run('b1', 'b')));
    await until(() => s.ex.started.length > 0, 'a probe to start', 1_000);
  });
});

describe('RunDispatcher with breakers: announcements and probe accounting', () => {
  it('announces a hold again when the run comes to wait for another dependency', async () => {
    const s = setup();
    s.b.set('llm', 'open', FAR);
    s.d.submit(task(run('r1', 'a', 'lookup')));
    await settle();
    s.b.set('llm', 'closed');
    s.b.set('tool', 'open', FAR);
    s.b.changed();
    await settle();
    expect(s.held.map((h) => `${h.runId}:${h.dependency}`)).toEqual(['r1:llm', 'r1:tool']);
  });

  it('a run gated unavailable (it goes to its fallback) takes no probe slot', async () => {
    const s = setup({ probes: { llm: 1 } });
    s.b.set('llm', 'open', NOW + 10_000);
    // Cannot wait for the probe: its deadline comes first, so it is dispatched to its fallback.
    s.d.submit(task(run('hurry', 'a', 'chat', 'interactive', NOW + 5_000)));
    await until(() => s.ex.started.includes('hurry'), 'the fallback run to start');
    s.advance(10_000);
    s.d.submit(task(run('probe', 'b', 'chat', 'interactive', FAR + 60_000)));
    await until(() => s.ex.started.includes('probe'), 'the probe to start although the fallback run still runs');
  });
});
