import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/obs/logger.js';
import { oldestPerScope, WaiterBook, type PermitWaiter } from '../../../src/permits/oldest-waiters.js';
import { OldestWaitersPublisher } from '../../../src/permits/oldest-waiters-publisher.js';
import { oldestAges } from '../../../src/permits/oldest-waiters-store.js';

const waiter = (since: number, ...scopes: string[]): PermitWaiter => ({ scopes, since });

describe('oldestPerScope', () => {
  it('takes, per scope, the earliest start among the waiters needing it', () => {
    const oldest = oldestPerScope([
      waiter(300, 'global', 'tenant:a', 'workflow:w'),
      waiter(100, 'global', 'class:batch', 'tenant:b', 'workflow:w'),
      waiter(200, 'global', 'tenant:a', 'workflow:v'),
      waiter(50, 'dependency:llm'),
    ]);
    expect(Object.fromEntries(oldest)).toEqual({ global: 100, 'class:batch': 100, 'tenant:a': 200, 'tenant:b': 100, 'workflow:w': 100, 'workflow:v': 200, 'dependency:llm': 50 });
  });

  it('answers nothing for no waiters', () => {
    expect(oldestPerScope([]).size).toBe(0);
  });
});

describe('WaiterBook', () => {
  const oldestOf = (book: WaiterBook) => Object.fromEntries(oldestPerScope(book.waiters()));

  it('follows waiters as they come and go in any order', () => {
    const book = new WaiterBook();
    const first = book.enter(['dependency:llm'], 100);
    const second = book.enter(['dependency:llm'], 200);
    const tool = book.enter(['dependency:kb'], 150);
    expect(oldestOf(book)).toEqual({ 'dependency:llm': 100, 'dependency:kb': 150 });
    first();
    expect(oldestOf(book)).toEqual({ 'dependency:llm': 200, 'dependency:kb': 150 });
    tool();
    second();
    expect(oldestOf(book)).toEqual({});
    expect(book.size).toBe(0);
  });

  it('keeps a tie: two waiters since the same moment are two, and the scope waits until both left', () => {
    const book = new WaiterBook();
    const a = book.enter(['dependency:llm'], 100);
    const b = book.enter(['dependency:llm'], 100);
    a();
    // Leaving twice takes nobody else with it.
    a();
    expect(oldestOf(book)).toEqual({ 'dependency:llm': 100 });
    b();
    expect(oldestOf(book)).toEqual({});
  });

  it("keeps its own copy of a waiter's scopes", () => {
    const book = new WaiterBook();
    const scopes = ['dependency:llm'];
    book.enter(scopes, 100);
    scopes[0] = 'dependency:other';
    expect(oldestOf(book)).toEqual({ 'dependency:llm': 100 });
  });
});

describe('oldestAges', () => {
  const entry = (until: number, since: Record<string, number>) => JSON.stringify({ until, since });

  it('takes the earliest start per scope across live entries, as seconds waited at now', () => {
    const ages = oldestAges({ p1: entry(20_000, { global: 4_000, 'tenant:a': 9_000 }), p2: entry(12_000, { global: 7_000, 'dependency:llm': 9_500 }) }, 10_000);
    expect(Object.fromEntries(ages)).toEqual({ global: 6, 'tenant:a': 1, 'dependency:llm': 0.5 });
  });

  it('leaves out lapsed entries (a dead processor) and unreadable ones', () => {
    const ages = oldestAges({ dead: entry(10_000, { global: 1_000 }), live: entry(10_001, { global: 8_000 }), junk: 'not json', odd: JSON.stringify({ since: { global: 0 } }), bad: entry(20_000, { global: 'x' } as never) }, 10_000);
    expect(Object.fromEntries(ages)).toEqual({ global: 2 });
  });

  it('never answers a negative wait (a start after now, from another clock)', () => {
    expect(Object.fromEntries(oldestAges({ p: entry(20_000, { global: 10_500 }) }, 10_000))).toEqual({ global: 0 });
  });
});

describe('OldestWaitersPublisher', () => {
  function fixture(opts: { failing?: () => boolean } = {}) {
    const published: { instance: string; oldest: Record<string, number>; now: number }[] = [];
    let waiters: PermitWaiter[] = [];
    const publisher = new OldestWaitersPublisher({
      store: {
        publish: async (instance, oldest, now) => {
          if (opts.failing?.()) throw new Error('Redis unreachable');
          published.push({ instance, oldest: Object.fromEntries(oldest), now });
          return 1;
        },
      },
      instance: 'p1',
      waiters: () => waiters,
      scopes: new Set(['global', 'tenant:a', 'dependency:llm']),
      everyMs: 60_000,
      logger: createLogger('silent'),
      now: () => 5_000,
    });
    return { publisher, published, setWaiters: (w: PermitWaiter[]) => (waiters = w) };
  }

  it('publishes the oldest waiter of each configured scope, leaving out scopes not in the config', async () => {
    const f = fixture();
    f.setWaiters([waiter(1_000, 'global', 'tenant:a', 'workflow:unknown'), waiter(2_000, 'dependency:llm', 'dependency:llm:tenant:a')]);
    await f.publisher.tick();
    expect(f.published).toEqual([{ instance: 'p1', oldest: { global: 1_000, 'tenant:a': 1_000, 'dependency:llm': 2_000 }, now: 5_000 }]);
  });

  it('writes nothing while nothing waits, but once to remove its entry when the last waiter left', async () => {
    const f = fixture();
    await f.publisher.tick();
    expect(f.published).toEqual([]);
    f.setWaiters([waiter(1_000, 'global')]);
    await f.publisher.tick();
    f.setWaiters([]);
    await f.publisher.tick();
    await f.publisher.tick();
    expect(f.published.map((p) => p.oldest)).toEqual([{ global: 1_000 }, {}]);
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
    f.setWaiters([waiter(1_000, 'global')]);
    await f.publisher.tick();
    await f.publisher.stop();
    expect(f.published.map((p) => p.oldest)).toEqual([{}, { global: 1_000 }, {}]);
  });

  it('does not start a publication while one is in flight', async () => {
    const f = fixture();
    f.setWaiters([waiter(1_000, 'global')]);
    await Promise.all([f.publisher.tick(), f.publisher.tick()]);
    expect(f.published).toHaveLength(1);
  });
});
