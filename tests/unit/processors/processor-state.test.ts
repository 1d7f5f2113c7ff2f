import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/obs/logger.js';
import type { PermitWaiter } from '../../../src/permits/oldest-waiters.js';
import type { HeldCount } from '../../../src/processors/breaker-holds.js';
import { isIdle, MAX_LISTED_PAUSED, mergeProcessorStates, publishedParts, type PausedPartition, type ProcessorState } from '../../../src/processors/processor-state.js';
import { ProcessorStatePublisher } from '../../../src/processors/processor-state-publisher.js';

const waiter = (since: number, ...scopes: string[]): PermitWaiter => ({ scopes, since });
const paused = (topic: string, partition: number, reason: PausedPartition['reason'] = 'buffer_full'): PausedPartition => ({ topic, partition, reason });
const held = (dependency: string, tenant: string, runs: number, runClass: HeldCount['runClass'] = 'batch'): HeldCount => ({ dependency, tenant, runClass, runs });
const state = (s: Partial<ProcessorState>): ProcessorState => ({ oldest: new Map(), paused: [], held: [], ...s });

describe('publishedParts', () => {
  it('leaves out what a processor has none of', () => {
    expect(publishedParts(state({}))).toEqual({});
    expect(publishedParts(state({ held: [held('llm', 'a', 0)] }))).toEqual({});
  });

  it('counts paused partitions per reason and names them in order', () => {
    expect(publishedParts(state({ paused: [paused('t2', 0, 'breaker_open'), paused('t1', 3), paused('t1', 1)] }))).toEqual({
      paused: { counts: { buffer_full: 2, breaker_open: 1 }, listed: [['t1', 1, 'buffer_full'], ['t1', 3, 'buffer_full'], ['t2', 0, 'breaker_open']] },
    });
  });

  it(`names at most ${MAX_LISTED_PAUSED} paused partitions, the same first ones each time, and counts them all`, () => {
    const many = Array.from({ length: MAX_LISTED_PAUSED + 10 }, (_, i) => paused('t', MAX_LISTED_PAUSED + 10 - i));
    const parts = publishedParts(state({ paused: many }));
    expect(parts.paused!.counts).toEqual({ buffer_full: MAX_LISTED_PAUSED + 10 });
    expect(parts.paused!.listed).toHaveLength(MAX_LISTED_PAUSED);
    expect(parts.paused!.listed[0]).toEqual(['t', 1, 'buffer_full']);
    expect(parts.paused!.listed.at(-1)).toEqual(['t', MAX_LISTED_PAUSED, 'buffer_full']);
  });

  it('sums held runs per dependency and tenant, over the classes', () => {
    expect(publishedParts(state({ held: [held('llm', 'a', 2, 'interactive'), held('llm', 'a', 1), held('llm', 'b', 1), held('kb', 'a', 0)] }))).toEqual({ held: { llm: { a: 3, b: 1 } } });
  });

  it('calls a processor idle only with nothing waiting, paused or held', () => {
    expect(isIdle(state({}))).toBe(true);
    expect(isIdle(state({ held: [held('llm', 'a', 0)] }))).toBe(true);
    expect(isIdle(state({ oldest: new Map([['global', 1]]) }))).toBe(false);
    expect(isIdle(state({ paused: [paused('t', 0)] }))).toBe(false);
    expect(isIdle(state({ held: [held('llm', 'a', 1)] }))).toBe(false);
  });
});

describe('mergeProcessorStates', () => {
  const entry = (until: number, rest: Record<string, unknown> = {}) => JSON.stringify({ until, since: {}, ...rest });

  it('takes the earliest start per scope across live entries, as seconds waited at now', () => {
    const merged = mergeProcessorStates({ p1: entry(20_000, { since: { global: 4_000, 'tenant:a': 9_000 } }), p2: entry(12_000, { since: { global: 7_000, 'dependency:llm': 9_500 } }) }, 10_000);
    expect(Object.fromEntries(merged.oldestWaitingSec)).toEqual({ global: 6, 'tenant:a': 1, 'dependency:llm': 0.5 });
  });

  it('never answers a negative wait (a start after now, from another clock)', () => {
    expect(Object.fromEntries(mergeProcessorStates({ p: entry(20_000, { since: { global: 10_500 } }) }, 10_000).oldestWaitingSec)).toEqual({ global: 0 });
  });

  it('lists paused partitions per reason with how many processors hold them, and counts those left unnamed', () => {
    const merged = mergeProcessorStates(
      {
        p1: entry(20_000, { paused: { counts: { buffer_full: 2, breaker_open: 1 }, listed: [['t1', 1, 'buffer_full'], ['t1', 0, 'buffer_full'], ['t2', 4, 'breaker_open']] } }),
        p2: entry(20_000, { paused: { counts: { breaker_open: 300 }, listed: [['t2', 7, 'breaker_open'], ['t1', 9, 'breaker_open']] } }),
      },
      10_000,
    );
    expect(merged.paused).toEqual([
      { reason: 'breaker_open', partitions: 301, processors: 2, topics: [{ topic: 't1', partitions: [9] }, { topic: 't2', partitions: [4, 7] }], unlisted: 298 },
      { reason: 'buffer_full', partitions: 2, processors: 1, topics: [{ topic: 't1', partitions: [0, 1] }], unlisted: 0 },
    ]);
  });

  it('sums held runs per dependency and per tenant over the processors', () => {
    const merged = mergeProcessorStates({ p1: entry(20_000, { held: { llm: { a: 3, b: 1 } } }), p2: entry(20_000, { held: { llm: { a: 1 }, kb: { c: 2 } } }) }, 10_000);
    expect(merged.held).toEqual([
      { dependency: 'kb', runs: 2, tenants: { c: 2 } },
      { dependency: 'llm', runs: 5, tenants: { a: 4, b: 1 } },
    ]);
  });

  it("leaves out lapsed entries (a dead processor), unreadable ones, and an entry's unreadable parts", () => {
    const merged = mergeProcessorStates(
      {
        dead: entry(10_000, { since: { global: 1_000 }, paused: { counts: { buffer_full: 1 }, listed: [['t', 0, 'buffer_full']] }, held: { llm: { a: 9 } } }),
        live: entry(10_001, { since: { global: 8_000, bad: 'x' }, paused: { counts: { buffer_full: 'x', breaker_open: 1 }, listed: [['t', 1, 'breaker_open'], 'junk', [2, 'x', 'breaker_open']] }, held: { llm: { a: 1, b: -1, c: 0.5 }, kb: 'x' } }),
        junk: 'not json',
        odd: JSON.stringify({ since: { global: 0 }, held: { llm: { a: 5 } } }),
        listless: entry(20_000, { paused: { counts: { breaker_open: 2 }, listed: {} } }),
      },
      10_000,
    );
    expect(Object.fromEntries(merged.oldestWaitingSec)).toEqual({ global: 2 });
    expect(merged.paused).toEqual([{ reason: 'breaker_open', partitions: 3, processors: 2, topics: [{ topic: 't', partitions: [1] }], unlisted: 2 }]);
    expect(merged.held).toEqual([{ dependency: 'llm', runs: 1, tenants: { a: 1 } }]);
  });

  it('answers nothing for no entries', () => {
    expect(mergeProcessorStates({}, 10_000)).toEqual({ oldestWaitingSec: new Map(), paused: [], held: [] });
  });
});

describe('ProcessorStatePublisher', () => {
  function fixture(opts: { failing?: () => boolean } = {}) {
    const published: { instance: string; oldest: Record<string, number>; paused: PausedPartition[]; held: HeldCount[]; now: number }[] = [];
    let waiters: PermitWaiter[] = [];
    let pausedNow: PausedPartition[] = [];
    let heldNow: HeldCount[] = [];
    const publisher = new ProcessorStatePublisher({
      store: {
        publish: async (instance, s, now) => {
          if (opts.failing?.()) throw new Error('Redis unreachable');
          published.push({ instance, oldest: Object.fromEntries(s.oldest), paused: [...s.paused], held: [...s.held], now });
          return 1;
        },
      },
      instance: 'p1',
      waiters: () => waiters,
      scopes: new Set(['global', 'tenant:a', 'dependency:llm']),
      paused: () => pausedNow,
      held: () => heldNow,
      everyMs: 60_000,
      logger: createLogger('silent'),
      now: () => 5_000,
    });
    return {
      publisher,
      published,
      setWaiters: (w: PermitWaiter[]) => (waiters = w),
      setPaused: (p: PausedPartition[]) => (pausedNow = p),
      setHeld: (h: HeldCount[]) => (heldNow = h),
    };
  }

  it('publishes the oldest waiter of each configured scope, leaving out scopes not in the config, with its paused partitions and held runs', async () => {
    const f = fixture();
    f.setWaiters([waiter(1_000, 'global', 'tenant:a', 'workflow:unknown'), waiter(2_000, 'dependency:llm', 'dependency:llm:tenant:a')]);
    f.setPaused([paused('t', 0, 'breaker_open')]);
    f.setHeld([held('llm', 'a', 2)]);
    await f.publisher.tick();
    expect(f.published).toEqual([{ instance: 'p1', oldest: { global: 1_000, 'tenant:a': 1_000, 'dependency:llm': 2_000 }, paused: [paused('t', 0, 'breaker_open')], held: [held('llm', 'a', 2)], now: 5_000 }]);
  });

  it('publishes a processor with paused partitions or held runs although nothing waits for a permit', async () => {
    const f = fixture();
    f.setPaused([paused('t', 0)]);
    await f.publisher.tick();
    f.setPaused([]);
    f.setHeld([held('llm', 'a', 1)]);
    await f.publisher.tick();
    expect(f.published.map((p) => [p.paused.length, p.held.length])).toEqual([[1, 0], [0, 1]]);
  });

  it('writes nothing while idle, but once to remove its entry when the last of its state went', async () => {
    const f = fixture();
    await f.publisher.tick();
    expect(f.published).toEqual([]);
    f.setWaiters([waiter(1_000, 'global')]);
    f.setHeld([held('llm', 'a', 1)]);
    await f.publisher.tick();
    f.setWaiters([]);
    await f.publisher.tick();
    f.setHeld([]);
    await f.publisher.tick();
    await f.publisher.tick();
    expect(f.published.map((p) => [Object.keys(p.oldest).length, p.held.length])).toEqual([[1, 1], [0, 1], [0, 0]]);
  });

  it('keeps trying to remove its entry after a failure, and removes it on stop', async () => {
    let failing = true;
    const f = fixture({ failing: () => failing });
    f.setWaiters([waiter(500, 'global')]);
    await f.publisher.tick();
    failing = false;
    f.setWaiters([]);
    await f.publisher.tick();
    await f.publisher.tick();
    expect(f.published.map((p) => p.oldest)).toEqual([{}]);
    f.setPaused([paused('t', 0)]);
    await f.publisher.tick();
    await f.publisher.stop();
    expect(f.published.map((p) => p.paused.length)).toEqual([0, 1, 0]);
  });

  it('does not start a publication while one is in flight', async () => {
    const f = fixture();
    f.setWaiters([waiter(1_000, 'global')]);
    await Promise.all([f.publisher.tick(), f.publisher.tick()]);
    expect(f.published).toHaveLength(1);
  });
});
