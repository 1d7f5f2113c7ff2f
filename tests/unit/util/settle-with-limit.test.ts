import { describe, expect, it } from 'vitest';
import { settleWithLimit } from '../../../src/util/settle-with-limit.js';

/** A task whose calls finish when the test says so, recording how many ran at once. */
function gatedTasks() {
  let running = 0;
  let peak = 0;
  const started: number[] = [];
  const gates = new Map<number, { resolve: (v: string) => void; reject: (e: Error) => void }>();
  const task = (item: number) =>
    new Promise<string>((resolve, reject) => {
      running++;
      peak = Math.max(peak, running);
      started.push(item);
      gates.set(item, {
        resolve: (v) => (running--, resolve(v)),
        reject: (e) => (running--, reject(e)),
      });
    });
  const tick = () => new Promise((r) => setImmediate(r));
  return { task, started, gates, tick, peak: () => peak };
}

describe('settleWithLimit', () => {
  it('runs at most `limit` at once and starts the next as soon as one ends', async () => {
    const g = gatedTasks();
    const done = settleWithLimit([1, 2, 3, 4, 5], 2, g.task);
    await g.tick();
    expect(g.started).toEqual([1, 2]);
    g.gates.get(2)!.resolve('b');
    await g.tick();
    expect(g.started).toEqual([1, 2, 3]);
    g.gates.get(1)!.reject(new Error('one failed'));
    await g.tick();
    expect(g.started).toEqual([1, 2, 3, 4]);
    for (const i of [3, 4]) g.gates.get(i)!.resolve(String(i));
    await g.tick();
    g.gates.get(5)!.resolve('e');
    const results = await done;
    expect(g.peak()).toBe(2);
    expect(results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error).message))).toEqual(['one failed', 'b', '3', '4', 'e']);
  });

  it('runs everything at once when the limit is above the count, and nothing for no items', async () => {
    const g = gatedTasks();
    const done = settleWithLimit([1, 2, 3], 8, g.task);
    await g.tick();
    expect(g.started).toEqual([1, 2, 3]);
    for (const i of [1, 2, 3]) g.gates.get(i)!.resolve(String(i));
    await done;
    expect(await settleWithLimit([], 3, g.task)).toEqual([]);
  });

  it('settles a task that throws synchronously like one that rejects', async () => {
    const results = await settleWithLimit([1], 1, () => {
      throw new Error('sync');
    });
    expect(results[0]).toMatchObject({ status: 'rejected' });
  });

  it('refuses a limit that is not a positive integer', async () => {
    for (const bad of [0, -1, 1.5, Number.NaN]) await expect(settleWithLimit([1], bad, async () => 1)).rejects.toThrow(RangeError);
  });
});
