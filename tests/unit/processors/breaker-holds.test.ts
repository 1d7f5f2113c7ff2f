import { describe, expect, it } from 'vitest';
import type { BreakerGate } from '../../../src/breakers/breaker-gate.js';
import type { RunClass, RunRequested } from '../../../src/events/schemas.js';
import { BreakerHolds, type DispatchBreakers, type HoldableTask } from '../../../src/processors/breaker-holds.js';
import type { Waiting } from '../../../src/processors/fair-queue.js';

function waiting(id: string, opts: { tenant?: string; runClass?: RunClass; source?: string; enqueuedAt?: number } = {}): Waiting<HoldableTask> {
  const runClass = opts.runClass ?? 'interactive';
  const tenant = opts.tenant ?? 't1';
  const run = { runId: id, tenantId: tenant, class: runClass } as RunRequested;
  return { runClass, tenant, enqueuedAt: opts.enqueuedAt ?? 0, item: { run, source: opts.source ?? 'p0' } };
}

/** Gates decided per run id by the test; `probing` is what each decision saw. */
function scriptedBreakers(gates: Record<string, BreakerGate>, probedBy: Record<string, string[]> = {}) {
  const seen: Record<string, number>[] = [];
  const breakers: DispatchBreakers = {
    gate(run, probing) {
      seen.push(Object.fromEntries(probing));
      return gates[run.runId] ?? { kind: 'go' };
    },
    probedBy: (run) => probedBy[run.runId] ?? [],
    onChange: () => () => undefined,
  };
  return { breakers, seen };
}

const WAIT_LLM: BreakerGate = { kind: 'wait', dependency: 'llm', until: 500 };

describe('BreakerHolds', () => {
  it('holds a run whose dependency is open and announces the hold once per dependency', () => {
    const announced: string[] = [];
    const { breakers } = scriptedBreakers({ a: WAIT_LLM });
    const holds = new BreakerHolds(breakers, (task, dependency, until) => announced.push(`${task.run.runId}:${dependency}:${until}`));
    const a = waiting('a');
    expect(holds.hold(a)).toBe(true);
    expect(holds.takeAll()).toEqual([a]);
    expect(holds.hold(a)).toBe(true);
    expect(announced).toEqual(['a:llm:500']);
    expect(holds.size).toBe(1);
  });

  it('lets go and unavailable runs through without holding them', () => {
    const { breakers } = scriptedBreakers({ u: { kind: 'unavailable', dependency: 'llm', until: 9 } });
    const holds = new BreakerHolds(breakers);
    expect(holds.hold(waiting('g'))).toBe(false);
    expect(holds.hold(waiting('u'))).toBe(false);
    expect(holds.size).toBe(0);
  });

  it('counts a passing run as a probe at once, so the next gate in the same round sees it, until it is given back', () => {
    const { breakers, seen } = scriptedBreakers({}, { p1: ['llm'], p2: ['llm', 'tool'] });
    const holds = new BreakerHolds(breakers);
    const p1 = waiting('p1');
    const p2 = waiting('p2');
    holds.hold(p1);
    holds.hold(p2);
    holds.hold(waiting('x'));
    expect(seen).toEqual([{}, { llm: 1 }, { llm: 2, tool: 1 }]);
    expect(p2.item.probes).toEqual(['llm', 'tool']);
    holds.unprobe(p1.item);
    holds.unprobe(p2.item);
    expect(p2.item.probes).toBeUndefined();
    holds.hold(waiting('y'));
    expect(seen.at(-1)).toEqual({});
  });

  it('giving back a run that never probed changes nothing', () => {
    const { breakers, seen } = scriptedBreakers({}, { p: ['llm'] });
    const holds = new BreakerHolds(breakers);
    holds.hold(waiting('p'));
    holds.unprobe(waiting('other').item);
    holds.hold(waiting('q'));
    expect(seen.at(-1)).toEqual({ llm: 1 });
  });

  it('reports held runs per partition, per class, per dependency/tenant/class, and the oldest of a class', () => {
    const { breakers } = scriptedBreakers({
      a: WAIT_LLM,
      b: WAIT_LLM,
      c: { kind: 'wait', dependency: 'tool', until: 9 },
      d: WAIT_LLM,
    });
    const holds = new BreakerHolds(breakers);
    holds.hold(waiting('a', { tenant: 't1', source: 'p0', enqueuedAt: 30 }));
    holds.hold(waiting('b', { tenant: 't1', source: 'p1', enqueuedAt: 10 }));
    holds.hold(waiting('c', { tenant: 't2', source: 'p1', enqueuedAt: 20 }));
    holds.hold(waiting('d', { tenant: 't1', runClass: 'batch', source: 'p0', enqueuedAt: 5 }));
    expect(holds.from('p0')).toBe(2);
    expect(holds.from('p1')).toBe(2);
    expect(holds.from('p9')).toBe(0);
    expect(holds.sizeOf('interactive')).toBe(3);
    expect(holds.sizeOf('batch')).toBe(1);
    expect(holds.oldest('interactive')).toBe(10);
    expect(holds.oldest('batch')).toBe(5);
    expect([...holds.counts().values()]).toEqual([
      { dependency: 'llm', tenant: 't1', runClass: 'interactive', runs: 2 },
      { dependency: 'tool', tenant: 't2', runClass: 'interactive', runs: 1 },
      { dependency: 'llm', tenant: 't1', runClass: 'batch', runs: 1 },
    ]);
  });

  it('gives every held run back oldest first and forgets revoked partitions', () => {
    const { breakers } = scriptedBreakers({ a: WAIT_LLM, b: WAIT_LLM, c: WAIT_LLM });
    const holds = new BreakerHolds(breakers);
    const [a, b, c] = [waiting('a', { source: 'p0' }), waiting('b', { source: 'p1' }), waiting('c', { source: 'p0' })];
    for (const w of [a, b, c]) holds.hold(w);
    expect(holds.forget((s) => s === 'p0')).toBe(2);
    expect(holds.oldest('batch')).toBeUndefined();
    expect(holds.takeAll()).toEqual([b]);
    expect(holds.size).toBe(0);
    expect(holds.takeAll()).toEqual([]);
  });
});
