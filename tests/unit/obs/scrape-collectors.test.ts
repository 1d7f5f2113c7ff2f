import { Counter, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { ScrapeCollectors, type ScrapeCollector } from '../../../src/obs/scrape-collectors.js';

function setup(timeoutMs = 50) {
  const registry = new Registry();
  const errors = new Counter({ name: 'errors_total', help: 'errors', labelNames: ['collector'], registers: [registry] });
  const collectors = new ScrapeCollectors(errors, timeoutMs);
  const count = async (collector: string) => (await errors.get()).values.find((v) => v.labels.collector === collector)?.value;
  return { collectors, count };
}

/** A collector recording what it was told to show or omit; `read` is the test's. */
function recording<T>(name: string, read: () => Promise<T>): ScrapeCollector<T> & { shown: T[]; omitted: number; reads: number } {
  const c = {
    name,
    shown: [] as T[],
    omitted: 0,
    reads: 0,
    read: () => {
      c.reads++;
      return read();
    },
    show: (v: T) => void c.shown.push(v),
    omit: () => void c.omitted++,
  };
  return c;
}

describe('ScrapeCollectors', () => {
  it('shows what each read returned and counts no error', async () => {
    const { collectors, count } = setup();
    const a = recording('permits', async () => 3);
    const b = recording('other', async () => 'x');
    collectors.add(a);
    collectors.add(b);
    expect(await count('permits')).toBe(0);
    expect(await collectors.collect()).toEqual([]);
    expect(a.shown).toEqual([3]);
    expect(b.shown).toEqual(['x']);
    expect(await count('permits')).toBe(0);
  });

  it('omits and counts only the collector whose read failed', async () => {
    const { collectors, count } = setup();
    const err = new Error('Connection is closed.');
    const failing = recording('permits', () => Promise.reject(err));
    const fine = recording('other', async () => 1);
    collectors.add(failing);
    collectors.add(fine);
    expect(await collectors.collect()).toEqual([{ collector: 'permits', err }]);
    expect(failing.omitted).toBe(1);
    expect(failing.shown).toEqual([]);
    expect(fine.shown).toEqual([1]);
    expect(await count('permits')).toBe(1);
    expect(await count('other')).toBe(0);
  });

  it('gives up on a read that does not answer in time, and ignores its late answer', async () => {
    const { collectors, count } = setup(20);
    let answer!: (v: number) => void;
    const hanging = recording('permits', () => new Promise<number>((r) => (answer = r)));
    collectors.add(hanging);
    const failures = await collectors.collect();
    expect(failures.map((f) => [f.collector, (f.err as Error).name])).toEqual([['permits', 'TimeoutError']]);
    expect(hanging.omitted).toBe(1);
    answer(9);
    await new Promise((r) => setImmediate(r));
    expect(hanging.shown).toEqual([]);
    expect(await count('permits')).toBe(1);
  });

  it('counts a read that throws synchronously as a failure', async () => {
    const { collectors, count } = setup();
    collectors.add(
      recording('permits', () => {
        throw new Error('not connected');
      }),
    );
    expect(await collectors.collect()).toHaveLength(1);
    expect(await count('permits')).toBe(1);
  });

  it('lets concurrent scrapes share one round of reads, and starts a new round after it', async () => {
    const { collectors } = setup();
    let answer!: (v: number) => void;
    const c = recording('permits', () => new Promise<number>((r) => (answer = r)));
    collectors.add(c);
    const rounds = Array.from({ length: 10 }, () => collectors.collect());
    answer(1);
    await Promise.all(rounds);
    expect(c.reads).toBe(1);
    const next = collectors.collect();
    answer(2);
    await next;
    expect(c.reads).toBe(2);
    expect(c.shown).toEqual([1, 2]);
  });
});
