import { describe, expect, it } from 'vitest';
import { FinishedRunsSampler } from '../../../src/api/console/overview-finished.js';
import type { FinishedRunsRow, FinishedWindow } from '../../../src/status/finished-runs.js';

const row = (bucketMs: number, runs: number): FinishedRunsRow => ({ bucketMs, status: 'completed', class: null, runs, onTime: runs, p50: 0, p99: 0 });

/** A sampler over a fake Postgres whose answers the test hands out; `clock` is its time. */
function sampler(o: { waitMs?: number } = {}) {
  const reads: { window: FinishedWindow; answer: (rows: FinishedRunsRow[]) => void; fail: (err: Error) => void }[] = [];
  const logged: string[] = [];
  let clock = 1_000_000;
  const s = new FinishedRunsSampler({
    read: (window) => new Promise((answer, fail) => reads.push({ window, answer, fail })),
    bucketMs: 5_000,
    waitMs: o.waitMs ?? 50,
    logger: { warn: (_: unknown, msg?: string) => void logged.push(`warn ${msg}`), info: (msg: string) => void logged.push(`info ${msg}`) } as never,
    now: () => clock,
  });
  return { s, reads, logged, advance: (ms: number) => (clock += ms) };
}

const lastRate = (series: Awaited<ReturnType<FinishedRunsSampler['current']>>) => series.points.at(-1)?.finished.completed;

describe('FinishedRunsSampler', () => {
  it('reads once per bucket however many ask, and the window ends at the last whole bucket', async () => {
    const { s, reads, advance } = sampler();
    const asked = [s.current(), s.current(), s.current()];
    expect(reads).toHaveLength(1);
    expect(reads[0]!.window).toEqual({ fromMs: 100_000, toMs: 1_000_000, bucketMs: 5_000 });
    reads[0]!.answer([row(995_000, 10)]);
    for (const series of await Promise.all(asked)) expect(lastRate(series)).toBe(2);
    advance(4_999);
    expect(lastRate(await s.current())).toBe(2);
    expect(reads).toHaveLength(1);
    advance(1);
    const next = s.current();
    expect(reads).toHaveLength(2);
    reads[1]!.answer([row(1_000_000, 5)]);
    expect((await next).asOf).toBe(1_005_000);
    expect(lastRate(await next)).toBe(1);
  });

  it('keeps the last points, marked unavailable, while Postgres fails; and says so once', async () => {
    const { s, reads, logged, advance } = sampler();
    const first = s.current();
    reads[0]!.answer([row(995_000, 10)]);
    await first;
    for (const n of [1, 2]) {
      advance(5_000);
      const failed = s.current();
      reads[n]!.fail(new Error('connect ECONNREFUSED 127.0.0.1:5432'));
      expect(await failed).toMatchObject({ asOf: 1_000_000, unavailable: 'connect ECONNREFUSED 127.0.0.1:5432' });
      expect(lastRate(await failed)).toBe(2);
    }
    advance(5_000);
    const back = s.current();
    reads[3]!.answer([]);
    expect(await back).toMatchObject({ asOf: 1_015_000, unavailable: null });
    expect(logged.map((l) => l.split(' ')[0])).toEqual(['warn', 'info']);
  });

  it('answers after waitMs with what it has while a read is slow, and starts no second read meanwhile', async () => {
    const { s, reads, advance } = sampler({ waitMs: 20 });
    expect(await s.current()).toEqual({ points: [], asOf: null, unavailable: null });
    advance(60_000);
    await s.current();
    expect(reads).toHaveLength(1);
    reads[0]!.answer([row(995_000, 10)]);
    expect(lastRate(await s.current())).toBe(2);
  });
});
