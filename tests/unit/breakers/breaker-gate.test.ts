import { describe, expect, it } from 'vitest';
import { effectiveView, gateRun, type BreakerGate, type BreakerView, type GateInput } from '../../../src/breakers/breaker-gate.js';
import type { RunClass } from '../../../src/events/schemas.js';

const NOW = 1_800_000_000_000;
const MIN = 100;

const closed = (name: string, retryAt?: number): BreakerView => ({ name, state: 'closed', ...(retryAt !== undefined ? { retryAt } : {}) });
const open = (name: string, retryAt?: number): BreakerView => ({ name, state: 'open', ...(retryAt !== undefined ? { retryAt } : {}) });
const halfOpen = (name: string, retryAt?: number): BreakerView => ({ name, state: 'half_open', ...(retryAt !== undefined ? { retryAt } : {}) });

const views = (...vs: BreakerView[]) => new Map(vs.map((v) => [v.name, v]));

function gate(over: Partial<GateInput> & { views: ReadonlyMap<string, BreakerView> }): BreakerGate {
  return gateRun({ runClass: 'interactive', deadline: NOW + 60_000, needed: ['llm'], now: NOW, minCallMs: MIN, probeRoom: () => true, ...over });
}

const CLASSES: RunClass[] = ['interactive', 'batch'];
const GO: BreakerGate = { kind: 'go' };
const wait = (dependency: string, until: number): BreakerGate => ({ kind: 'wait', dependency, until });
const unavailable = (dependency: string, until: number): BreakerGate => ({ kind: 'unavailable', dependency, until });

describe('gateRun: nothing to wait for', () => {
  const cases: [string, ReadonlyMap<string, BreakerView>][] = [
    ['no view of the dependency (never seen: closed)', views()],
    ['closed', views(closed('llm'))],
    // A retryAt left on a closed view (a stale read) must not hold anything.
    ['closed with a stale retryAt in the future', views(closed('llm', NOW + 10_000))],
  ];
  for (const runClass of CLASSES) {
    for (const [what, vs] of cases) {
      it(`${runClass}: ${what} → go, even when no probe room is left`, () => {
        expect(gate({ runClass, views: vs, probeRoom: () => false })).toEqual(GO);
      });
    }
  }

  it('a run that needs nothing goes even with every breaker open', () => {
    expect(gate({ needed: [], views: views(open('llm', NOW + 10_000), halfOpen('tool')), probeRoom: () => false })).toEqual(GO);
  });

  it('does not judge the deadline itself: an expired interactive run with closed breakers goes (expiry is the dispatcher’s call)', () => {
    expect(gate({ deadline: NOW - 1, views: views(closed('llm')) })).toEqual(GO);
  });
});

describe('gateRun: open, next probe in the future', () => {
  const retryAt = NOW + 5_000;
  const vs = views(open('llm', retryAt));

  it('batch always waits for the probe, whatever its deadline (it expires if the deadline comes first)', () => {
    for (const deadline of [NOW + 3_600_000, retryAt + MIN, retryAt, NOW + 1, NOW - 1]) {
      expect(gate({ runClass: 'batch', deadline, views: vs }), `deadline ${deadline - NOW}`).toEqual(wait('llm', retryAt));
    }
  });

  // [deadline, expected]: waiting is worth it only if at least minCallMs remain after retryAt.
  const interactive: [string, number, BreakerGate][] = [
    ['far after the probe', retryAt + 60_000, wait('llm', retryAt)],
    ['exactly retryAt + minCallMs', retryAt + MIN, wait('llm', retryAt)],
    ['1 ms short of retryAt + minCallMs', retryAt + MIN - 1, unavailable('llm', retryAt)],
    ['at retryAt', retryAt, unavailable('llm', retryAt)],
    ['before retryAt', NOW + 1_000, unavailable('llm', retryAt)],
  ];
  for (const [what, deadline, expected] of interactive) {
    it(`interactive with a deadline ${what} → ${expected.kind}`, () => {
      expect(gate({ deadline, views: vs })).toEqual(expected);
    });
  }

  it('uses the given minCallMs, not a built-in one', () => {
    expect(gate({ deadline: retryAt + 1_000, minCallMs: 1_000, views: vs })).toEqual(wait('llm', retryAt));
    expect(gate({ deadline: retryAt + 1_000, minCallMs: 1_001, views: vs })).toEqual(unavailable('llm', retryAt));
  });

  it('free probe room does not let a run through before retryAt (1 ms early is still early)', () => {
    expect(gate({ views: views(open('llm', NOW + 1)), probeRoom: () => true })).toEqual(wait('llm', NOW + 1));
  });

  it('does not consult the probe room of a dependency that is not due yet', () => {
    const asked: string[] = [];
    gate({ views: vs, probeRoom: (d) => (asked.push(d), true) });
    expect(asked).toEqual([]);
  });
});

describe('gateRun: a closed dependency ramping up after its close', () => {
  it('lets runs go while its ramped cap has room, and holds them until now once it has none', () => {
    expect(gate({ views: views(closed('llm')), rampingUp: () => true, probeRoom: () => true })).toEqual(GO);
    expect(gate({ views: views(closed('llm')), rampingUp: () => true, probeRoom: () => false })).toEqual(wait('llm', NOW));
    expect(gate({ runClass: 'batch', deadline: NOW + 1, views: views(closed('llm')), rampingUp: () => true, probeRoom: () => false })).toEqual(wait('llm', NOW));
    expect(gate({ deadline: NOW + MIN - 1, views: views(closed('llm')), rampingUp: () => true, probeRoom: () => false })).toEqual(unavailable('llm', NOW));
  });

  it('does not consult the room of a closed dependency that is not ramping up, nor of one never seen', () => {
    const asked: string[] = [];
    expect(gate({ views: views(closed('llm')), rampingUp: () => false, probeRoom: (d) => (asked.push(d), false) })).toEqual(GO);
    expect(gate({ views: views(), rampingUp: () => true, probeRoom: (d) => (asked.push(d), false) })).toEqual(GO);
    expect(asked).toEqual([]);
  });
});

describe('gateRun: due for probing (half-open, open past retryAt, or open at an unknown time)', () => {
  const due: [string, BreakerView][] = [
    ['half_open', halfOpen('llm')],
    // The state is what counts: a retryAt left on a half-open view does not push the probe back.
    ['half_open with a stale retryAt in the future', halfOpen('llm', NOW + 10_000)],
    ['open with retryAt exactly now', open('llm', NOW)],
    ['open with retryAt in the past', open('llm', NOW - 30_000)],
    ['open without retryAt (unknown: treated as due)', open('llm')],
  ];

  for (const [what, view] of due) {
    describe(what, () => {
      for (const runClass of CLASSES) {
        it(`${runClass} goes while there is probe room`, () => {
          const asked: string[] = [];
          expect(gate({ runClass, views: views(view), probeRoom: (d) => (asked.push(d), true) })).toEqual(GO);
          expect(asked).toEqual(['llm']);
        });
      }

      it('batch waits until now when the probes are taken (it is looked at again on the next change or poll)', () => {
        expect(gate({ runClass: 'batch', deadline: NOW + 1, views: views(view), probeRoom: () => false })).toEqual(wait('llm', NOW));
      });

      it('interactive waits until now when at least minCallMs of its deadline remain (boundary included)', () => {
        expect(gate({ deadline: NOW + 60_000, views: views(view), probeRoom: () => false })).toEqual(wait('llm', NOW));
        expect(gate({ deadline: NOW + MIN, views: views(view), probeRoom: () => false })).toEqual(wait('llm', NOW));
      });

      it('interactive near its deadline gets its fallback at once', () => {
        expect(gate({ deadline: NOW + MIN - 1, views: views(view), probeRoom: () => false })).toEqual(unavailable('llm', NOW));
      });
    });
  }
});

describe('gateRun: several needed dependencies', () => {
  it('the latest `until` wins and names its dependency, whatever the order they are needed in', () => {
    const vs = views(open('llm', NOW + 500), open('tool', NOW + 2_000), halfOpen('search'));
    for (const needed of [
      ['llm', 'tool', 'search'],
      ['search', 'tool', 'llm'],
      ['tool', 'llm', 'search'],
    ]) {
      expect(gate({ runClass: 'batch', needed, views: vs, probeRoom: () => false }), needed.join()).toEqual(wait('tool', NOW + 2_000));
    }
  });

  it('a future retryAt beats a full probe room (now)', () => {
    const vs = views(halfOpen('llm'), open('tool', NOW + 1));
    expect(gate({ runClass: 'batch', needed: ['llm', 'tool'], views: vs, probeRoom: () => false })).toEqual(wait('tool', NOW + 1));
  });

  it('interactive is judged on the latest dependency: one it could wait for does not save it', () => {
    const vs = views(open('llm', NOW + 500), open('tool', NOW + 50_000));
    expect(gate({ needed: ['llm', 'tool'], deadline: NOW + 10_000, views: vs })).toEqual(unavailable('tool', NOW + 50_000));
    expect(gate({ needed: ['llm', 'tool'], deadline: NOW + 50_000 + MIN, views: vs })).toEqual(wait('tool', NOW + 50_000));
  });

  it('on a tie the first needed dependency is named', () => {
    const vs = views(open('llm', NOW + 500), open('tool', NOW + 500));
    expect(gate({ runClass: 'batch', needed: ['tool', 'llm'], views: vs })).toEqual(wait('tool', NOW + 500));
    expect(gate({ runClass: 'batch', needed: ['llm', 'tool'], views: vs })).toEqual(wait('llm', NOW + 500));
  });

  it('goes only when every needed dependency is closed or has probe room', () => {
    const vs = views(closed('llm'), halfOpen('tool'), open('search', NOW - 1));
    const needed = ['llm', 'tool', 'search'];
    expect(gate({ needed, views: vs, probeRoom: () => true })).toEqual(GO);
    expect(gate({ needed, views: vs, probeRoom: (d) => d !== 'search' })).toEqual(wait('search', NOW));
    expect(gate({ needed, views: vs, probeRoom: (d) => d !== 'tool' })).toEqual(wait('tool', NOW));
  });

  it('asks the probe room per dependency, by name', () => {
    const asked: string[] = [];
    gate({ needed: ['llm', 'tool', 'search'], views: views(halfOpen('llm'), closed('tool'), open('search')), probeRoom: (d) => (asked.push(d), true) });
    expect(asked).toEqual(['llm', 'search']);
  });

  it('ignores dependencies the run does not need, however open they are', () => {
    const vs = views(closed('llm'), open('tool', NOW + 3_600_000), halfOpen('search'), open('other'));
    expect(gate({ needed: ['llm'], views: vs, probeRoom: () => false })).toEqual(GO);
    expect(gate({ runClass: 'batch', needed: ['llm', 'search'], views: vs, probeRoom: () => false })).toEqual(wait('search', NOW));
  });
});

describe('effectiveView: an operator force decides until it ends', () => {
  const force = (mode: 'open' | 'closed', until: number) => ({ mode, until });

  it('forced open is open until the force ends, whatever the shared state', () => {
    for (const shared of [closed('llm'), halfOpen('llm'), open('llm', NOW + 5)]) {
      expect(effectiveView({ ...shared, forced: force('open', NOW + 60_000) }, NOW)).toEqual({ name: 'llm', state: 'open', retryAt: NOW + 60_000, forced: force('open', NOW + 60_000) });
    }
  });

  it('forced closed is closed with no ramp-up, even over an open breaker', () => {
    expect(effectiveView({ ...open('llm', NOW + 5_000), forced: force('closed', NOW + 1) }, NOW)).toEqual({ name: 'llm', state: 'closed', forced: force('closed', NOW + 1) });
    expect(effectiveView({ name: 'llm', state: 'closed', closedAt: NOW - 10, forced: force('closed', NOW + 1) }, NOW)).toEqual({ name: 'llm', state: 'closed', forced: force('closed', NOW + 1) });
  });

  it('a force past its end is dropped: the shared state is back (its key expired in Redis)', () => {
    expect(effectiveView({ ...open('llm', NOW + 5_000), forced: force('closed', NOW) }, NOW)).toEqual(open('llm', NOW + 5_000));
    expect(effectiveView({ ...closed('llm'), forced: force('open', NOW - 1) }, NOW)).toEqual(closed('llm'));
    expect(effectiveView(halfOpen('llm'), NOW)).toEqual(halfOpen('llm'));
  });

  it('runs wait out a forced-open dependency until the force ends, and go through a forced-closed one', () => {
    const forcedOpen = effectiveView({ ...closed('llm'), forced: force('open', NOW + 30_000) }, NOW);
    expect(gate({ runClass: 'batch', views: views(forcedOpen) })).toEqual(wait('llm', NOW + 30_000));
    expect(gate({ deadline: NOW + 10_000, views: views(forcedOpen) })).toEqual(unavailable('llm', NOW + 30_000));
    const forcedClosed = effectiveView({ ...open('llm', NOW + 30_000), forced: force('closed', NOW + 30_000) }, NOW);
    expect(gate({ views: views(forcedClosed), probeRoom: () => false })).toEqual(GO);
  });
});
