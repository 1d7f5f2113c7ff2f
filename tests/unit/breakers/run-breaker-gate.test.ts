import { describe, expect, it } from 'vitest';
import type { BreakerListener } from '../../../src/breakers/breaker-board.js';
import type { BreakerView } from '../../../src/breakers/breaker-gate.js';
import { RunBreakerGate } from '../../../src/breakers/run-breaker-gate.js';
import { loadConfig } from '../../../src/config/load.js';
import type { SluiceConfig } from '../../../src/config/schema.js';
import type { RunClass, RunRequested } from '../../../src/events/schemas.js';
import { MIN_USEFUL_CALL_MS } from '../../../src/runs/deadline.js';

const NOW = 1_800_000_000_000;
const CONFIG = loadConfig({ env: {} });
const ALL_DEPS = ['anthropic', 'order-lookup', 'report', 'notify'];

function run(workflow: string, runClass: RunClass = 'interactive', deadline = NOW + 60_000): RunRequested {
  return { runId: `r-${workflow}`, tenantId: 'tenant-a', workflow, class: runClass, admittedAt: NOW, deadline, attempt: 1, traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', input: '{}', idempotencyKey: null, dueAt: null };
}

/** The three board methods the gate uses, over a map the test edits. */
function fakeBoard() {
  const views = new Map<string, BreakerView>();
  const listeners = new Set<BreakerListener>();
  return {
    views,
    listeners,
    set(name: string, state: BreakerView['state'], retryAt?: number) {
      views.set(name, { name, state, ...(retryAt !== undefined ? { retryAt } : {}) });
    },
    board: {
      all: () => views,
      view: (d: string): BreakerView => views.get(d) ?? { name: d, state: 'closed' },
      onChange(l: BreakerListener) {
        listeners.add(l);
        return () => void listeners.delete(l);
      },
    },
  };
}

const none = new Map<string, number>();

function withBreaker(config: SluiceConfig, dep: string, patch: Partial<SluiceConfig['dependencies'][string]['breaker']>): SluiceConfig {
  const copy = structuredClone(config);
  copy.dependencies[dep]!.breaker = { ...copy.dependencies[dep]!.breaker, ...patch };
  return copy;
}

describe('RunBreakerGate: which dependencies a run needs', () => {
  it('reads them from the workflow’s steps, each once, in step order', () => {
    const f = fakeBoard();
    for (const d of ALL_DEPS) f.set(d, 'half_open');
    const g = new RunBreakerGate(CONFIG, f.board, () => NOW);
    expect(g.probedBy(run('support-reply'))).toEqual(['anthropic', 'order-lookup']);
    // report-digest calls `report` twice: it is still one dependency to probe.
    expect(g.probedBy(run('report-digest'))).toEqual(['anthropic', 'report', 'notify']);
  });

  it('gates only on the needed ones: an open dependency of another workflow does not hold a run', () => {
    const f = fakeBoard();
    f.set('report', 'open', NOW + 10_000);
    f.set('notify', 'open', NOW + 20_000);
    const g = new RunBreakerGate(CONFIG, f.board, () => NOW);
    expect(g.gate(run('support-reply'), none)).toEqual({ kind: 'go' });
    expect(g.gate(run('report-digest', 'batch'), none)).toEqual({ kind: 'wait', dependency: 'notify', until: NOW + 20_000 });
    f.set('order-lookup', 'open', NOW + 5_000);
    expect(g.gate(run('support-reply', 'batch'), none)).toEqual({ kind: 'wait', dependency: 'order-lookup', until: NOW + 5_000 });
  });

  it('an unknown workflow needs nothing: it goes with every breaker open and probes nothing', () => {
    const f = fakeBoard();
    for (const d of ALL_DEPS) f.set(d, 'open', NOW + 10_000);
    const g = new RunBreakerGate(CONFIG, f.board, () => NOW);
    for (const wf of ['no-such-workflow', 'constructor', '__proto__', 'toString', '']) {
      expect(g.gate(run(wf), none), wf).toEqual({ kind: 'go' });
      expect(g.probedBy(run(wf)), wf).toEqual([]);
    }
  });

  it('reads the board on every call, so a change is seen at once', () => {
    const f = fakeBoard();
    const g = new RunBreakerGate(CONFIG, f.board, () => NOW);
    expect(g.gate(run('support-reply'), none)).toEqual({ kind: 'go' });
    f.set('anthropic', 'open', NOW + 1_000);
    expect(g.gate(run('support-reply'), none)).toEqual({ kind: 'wait', dependency: 'anthropic', until: NOW + 1_000 });
    f.set('anthropic', 'closed');
    expect(g.gate(run('support-reply'), none)).toEqual({ kind: 'go' });
  });
});

describe('RunBreakerGate: time and deadlines', () => {
  it('uses the injected clock: an open breaker is due for a probe from its retryAt on', () => {
    const f = fakeBoard();
    f.set('anthropic', 'open', NOW + 50);
    let now = NOW;
    const g = new RunBreakerGate(CONFIG, f.board, () => now);
    expect(g.gate(run('support-reply'), none)).toEqual({ kind: 'wait', dependency: 'anthropic', until: NOW + 50 });
    now = NOW + 50;
    expect(g.gate(run('support-reply'), none)).toEqual({ kind: 'go' });
  });

  it('an interactive run waits for the next probe only within its wait share and with what its steps need left; batch waits', () => {
    const f = fakeBoard();
    const retryAt = NOW + 5_000;
    f.set('order-lookup', 'open', retryAt);
    const g = new RunBreakerGate(CONFIG, f.board, () => NOW);
    // admitted now: half of a 10 s run's time is exactly the 5 s to the probe, and its three steps' 300 ms still fit
    expect(CONFIG.admission.interactiveWaitShare).toBe(0.5);
    expect(g.gate(run('support-reply', 'interactive', NOW + 10_000), none)).toEqual({ kind: 'wait', dependency: 'order-lookup', until: retryAt });
    expect(g.gate(run('support-reply', 'interactive', NOW + 9_998), none)).toEqual({ kind: 'unavailable', dependency: 'order-lookup', until: retryAt });
    // within its deadline by a useful call's minimum, but not with its three steps: unavailable at once
    expect(g.gate(run('support-reply', 'interactive', retryAt + 3 * MIN_USEFUL_CALL_MS - 1), none)).toEqual({ kind: 'unavailable', dependency: 'order-lookup', until: retryAt });
    expect(g.gate(run('support-reply', 'batch', retryAt - 1), none)).toEqual({ kind: 'wait', dependency: 'order-lookup', until: retryAt });
  });
});

describe('RunBreakerGate: probe room', () => {
  it('allows the configured default of 2 probing runs per dependency (halfOpenProbes)', () => {
    expect(CONFIG.dependencies.anthropic!.breaker.halfOpenProbes).toBe(2);
    const f = fakeBoard();
    f.set('anthropic', 'half_open');
    const g = new RunBreakerGate(CONFIG, f.board, () => NOW);
    expect(g.gate(run('support-reply'), new Map([['anthropic', 0]]))).toEqual({ kind: 'go' });
    expect(g.gate(run('support-reply'), new Map([['anthropic', 1]]))).toEqual({ kind: 'go' });
    expect(g.gate(run('support-reply'), new Map([['anthropic', 2]]))).toEqual({ kind: 'wait', dependency: 'anthropic', until: NOW });
    expect(g.gate(run('support-reply'), new Map([['anthropic', 3]]))).toEqual({ kind: 'wait', dependency: 'anthropic', until: NOW });
  });

  it('follows halfOpenProbes of each dependency from config', () => {
    const f = fakeBoard();
    f.set('anthropic', 'half_open');
    f.set('order-lookup', 'open', NOW - 1);
    const config = withBreaker(withBreaker(CONFIG, 'anthropic', { halfOpenProbes: 1 }), 'order-lookup', { halfOpenProbes: 5 });
    const g = new RunBreakerGate(config, f.board, () => NOW);
    expect(g.gate(run('support-reply'), new Map([['order-lookup', 4]]))).toEqual({ kind: 'go' });
    expect(g.gate(run('support-reply'), new Map([['anthropic', 1]]))).toEqual({ kind: 'wait', dependency: 'anthropic', until: NOW });
    expect(g.gate(run('support-reply'), new Map([['order-lookup', 5]]))).toEqual({ kind: 'wait', dependency: 'order-lookup', until: NOW });
  });

  it('counts probing runs per dependency: another dependency’s probes leave this one’s room alone', () => {
    const f = fakeBoard();
    f.set('anthropic', 'half_open');
    const g = new RunBreakerGate(CONFIG, f.board, () => NOW);
    expect(g.gate(run('support-reply'), new Map([['order-lookup', 99], ['report', 99]]))).toEqual({ kind: 'go' });
  });

  it('room is irrelevant while closed or not yet due: a full count neither holds a closed one nor moves retryAt', () => {
    const f = fakeBoard();
    const g = new RunBreakerGate(CONFIG, f.board, () => NOW);
    const full = new Map([['anthropic', 2], ['order-lookup', 1_000]]);
    expect(g.gate(run('support-reply', 'batch'), full)).toEqual({ kind: 'go' });
    f.set('anthropic', 'open', NOW + 1_000);
    expect(g.gate(run('support-reply', 'batch'), full)).toEqual({ kind: 'wait', dependency: 'anthropic', until: NOW + 1_000 });
  });

  it('a needed dependency missing from config gets a single probe (the conservative fallback)', () => {
    const config = structuredClone(CONFIG);
    delete config.dependencies['order-lookup'];
    const f = fakeBoard();
    f.set('order-lookup', 'half_open');
    const g = new RunBreakerGate(config, f.board, () => NOW);
    expect(g.gate(run('support-reply'), none)).toEqual({ kind: 'go' });
    expect(g.gate(run('support-reply'), new Map([['order-lookup', 1]]))).toEqual({ kind: 'wait', dependency: 'order-lookup', until: NOW });
  });
});

describe('RunBreakerGate.probedBy', () => {
  it('lists the needed dependencies that are not closed, open or half-open alike', () => {
    const f = fakeBoard();
    f.set('anthropic', 'half_open');
    f.set('order-lookup', 'closed');
    f.set('report', 'open', NOW + 1_000);
    f.set('notify', 'closed');
    const g = new RunBreakerGate(CONFIG, f.board, () => NOW);
    expect(g.probedBy(run('support-reply'))).toEqual(['anthropic']);
    expect(g.probedBy(run('report-digest'))).toEqual(['anthropic', 'report']);
    f.set('anthropic', 'closed');
    expect(g.probedBy(run('support-reply'))).toEqual([]);
    expect(g.probedBy(run('report-digest'))).toEqual(['report']);
  });

  it('a dependency the board has never seen counts as closed', () => {
    const g = new RunBreakerGate(CONFIG, fakeBoard().board, () => NOW);
    expect(g.probedBy(run('report-digest'))).toEqual([]);
  });
});

describe('RunBreakerGate.onChange', () => {
  it('forwards every board change to the listener and unsubscribes through the board', () => {
    const f = fakeBoard();
    const g = new RunBreakerGate(CONFIG, f.board, () => NOW);
    const calls: unknown[][] = [];
    const off = g.onChange((...args: unknown[]) => void calls.push(args));
    expect(f.listeners.size).toBe(1);
    for (const l of f.listeners) {
      l({ name: 'anthropic', state: 'open', retryAt: NOW }, { name: 'anthropic', state: 'closed' });
      l({ name: 'anthropic', state: 'half_open' }, { name: 'anthropic', state: 'open', retryAt: NOW });
    }
    // The dispatcher only needs a nudge: the views are not passed on.
    expect(calls).toEqual([[], []]);
    off();
    expect(f.listeners.size).toBe(0);
  });
});

describe('RunBreakerGate: ramp-up after a close', () => {
  const config = withBreaker(CONFIG, 'anthropic', { rampUp: { initialFraction: 0.1, stepFraction: 0.1, intervalMs: 1_000 } });

  it('starts only as many runs needing the dependency as its ramped cap allows, counting them as probes', () => {
    const f = fakeBoard();
    f.views.set('anthropic', { name: 'anthropic', state: 'closed', closedAt: NOW });
    let now = NOW;
    const g = new RunBreakerGate(config, f.board, () => now);
    expect(g.probedBy(run('support-reply'))).toEqual(['anthropic']);
    // 0.1 of 16 is 1 run at first
    expect(g.gate(run('support-reply'), new Map([['anthropic', 0]]))).toEqual({ kind: 'go' });
    expect(g.gate(run('support-reply'), new Map([['anthropic', 1]]))).toEqual({ kind: 'wait', dependency: 'anthropic', until: NOW });
    now = NOW + 2_000;
    // 0.3 of 16 is 4
    expect(g.gate(run('support-reply'), new Map([['anthropic', 3]]))).toEqual({ kind: 'go' });
    expect(g.gate(run('support-reply'), new Map([['anthropic', 4]]))).toEqual({ kind: 'wait', dependency: 'anthropic', until: now });
    now = NOW + 9_000;
    expect(g.probedBy(run('support-reply'))).toEqual([]);
    expect(g.gate(run('support-reply'), new Map([['anthropic', 100]]))).toEqual({ kind: 'go' });
  });

  it('leaves a dependency without rampUp, or never tripped, alone', () => {
    const f = fakeBoard();
    f.views.set('order-lookup', { name: 'order-lookup', state: 'closed', closedAt: NOW });
    const g = new RunBreakerGate(config, f.board, () => NOW);
    expect(g.probedBy(run('support-reply'))).toEqual([]);
    expect(g.gate(run('support-reply'), new Map([['anthropic', 100], ['order-lookup', 100]]))).toEqual({ kind: 'go' });
  });
});
