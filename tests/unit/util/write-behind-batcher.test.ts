import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { WriteBehindBatcher, WriteBehindClosedError, WriteBehindTimeoutError, type WriteBehindOptions } from '../../../src/util/write-behind-batcher.js';

interface Row {
  id: string;
  n: number;
}

interface WriteCall {
  rows: Row[];
  resolve: () => void;
  reject: (err: Error) => void;
}

/** A `write` whose every call stays in flight until the test settles it. */
function controlledWrite(): { write: (rows: readonly Row[]) => Promise<void>; calls: WriteCall[] } {
  const calls: WriteCall[] = [];
  return {
    calls,
    write: (rows) => new Promise<void>((resolve, reject) => void calls.push({ rows: [...rows], resolve, reject })),
  };
}

const row = (n: number): Row => ({ id: `r${n}`, n });

function batcher(write: WriteBehindOptions<Row>['write'], opts: Partial<WriteBehindOptions<Row>> = {}) {
  return new WriteBehindBatcher<Row>({ write, key: (r) => r.id, maxBatch: 3, maxWaitMs: 10, maxPending: 5, backoffMs: (attempt) => 100 * attempt, ...opts });
}

beforeEach(() => vi.useFakeTimers());
afterEach(() => vi.useRealTimers());

describe('WriteBehindBatcher', () => {
  it('writes a partial batch once the oldest row waited maxWaitMs, not before', async () => {
    const { write, calls } = controlledWrite();
    const b = batcher(write);
    await b.add(row(1), 1_000);
    await b.add(row(2), 1_000);
    await vi.advanceTimersByTimeAsync(9);
    expect(calls).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(calls.map((c) => c.rows.map((r) => r.n))).toEqual([[1, 2]]);
  });

  it('writes at once when a batch is full, and what queued during a write goes in the next batch', async () => {
    const { write, calls } = controlledWrite();
    const written: number[] = [];
    const b = batcher(write, { maxPending: 10, onWritten: (rows) => written.push(rows) });
    for (const n of [1, 2, 3, 4, 5]) await b.add(row(n), 1_000);
    expect(calls.map((c) => c.rows.map((r) => r.n))).toEqual([[1, 2, 3]]);
    expect(b.pending).toBe(5);
    calls[0]!.resolve();
    await vi.advanceTimersByTimeAsync(0);
    expect(written).toEqual([3]);
    expect(b.pending).toBe(2);
    // The rest waited while the first write was in flight: the wait starts over for them.
    await vi.advanceTimersByTimeAsync(10);
    expect(calls.map((c) => c.rows.map((r) => r.n))).toEqual([[1, 2, 3], [4, 5]]);
  });

  it('answers lookups for rows queued or being written, and forgets them once written', async () => {
    const { write, calls } = controlledWrite();
    const b = batcher(write);
    await b.add(row(1), 1_000);
    expect(b.get('r1')).toEqual(row(1));
    await vi.advanceTimersByTimeAsync(10);
    expect(calls).toHaveLength(1);
    expect(b.get('r1')).toEqual(row(1));
    calls[0]!.resolve();
    await vi.advanceTimersByTimeAsync(0);
    expect(b.get('r1')).toBeUndefined();
    expect(b.get('r2')).toBeUndefined();
  });

  it('holds a writer past maxPending until a write made room (backpressure), and never drops a row', async () => {
    const { write, calls } = controlledWrite();
    const b = batcher(write);
    for (const n of [1, 2, 3, 4, 5]) await b.add(row(n), 1_000);
    let sixthQueued = false;
    const sixth = b.add(row(6), 1_000).then(() => (sixthQueued = true));
    await vi.advanceTimersByTimeAsync(50);
    expect(sixthQueued).toBe(false);
    expect(b.pending).toBe(5);
    calls[0]!.resolve();
    await sixth;
    expect(b.pending).toBe(3);
    await vi.advanceTimersByTimeAsync(0);
    expect(calls[1]!.rows.map((r) => r.n)).toEqual([4, 5, 6]);
  });

  it('refuses a writer that found no room within its timeout, and does not queue its row', async () => {
    const { write } = controlledWrite();
    const b = batcher(write);
    for (const n of [1, 2, 3, 4, 5]) await b.add(row(n), 1_000);
    const late = b.add(row(6), 200).catch((err: unknown) => err);
    await vi.advanceTimersByTimeAsync(200);
    expect(await late).toBeInstanceOf(WriteBehindTimeoutError);
    expect(b.pending).toBe(5);
    expect(b.get('r6')).toBeUndefined();
  });

  it('retries a failed write with backoff, the same rows, and reports each failure', async () => {
    const { write, calls } = controlledWrite();
    const failures: [number, number][] = [];
    const b = batcher(write, { onFailure: (_err, attempt, _rows, waitMs) => failures.push([attempt, waitMs]) });
    await b.add(row(1), 1_000);
    await vi.advanceTimersByTimeAsync(10);
    calls[0]!.reject(new Error('connection refused'));
    await vi.advanceTimersByTimeAsync(99);
    expect(calls).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(calls).toHaveLength(2);
    calls[1]!.reject(new Error('connection refused'));
    await vi.advanceTimersByTimeAsync(200);
    expect(calls.map((c) => c.rows.map((r) => r.n))).toEqual([[1], [1], [1]]);
    expect(failures).toEqual([
      [1, 100],
      [2, 200],
    ]);
    expect(b.get('r1')).toEqual(row(1));
    calls[2]!.resolve();
    await vi.advanceTimersByTimeAsync(0);
    expect(b.pending).toBe(0);
  });

  it('close writes everything pending without waiting maxWaitMs, then refuses new rows', async () => {
    const written: number[][] = [];
    const b = batcher(async (rows) => void written.push(rows.map((r) => r.n)), { maxWaitMs: 60_000, maxPending: 10 });
    for (const n of [1, 2, 3, 4]) await b.add(row(n), 1_000);
    expect(await b.close(5_000)).toBe(0);
    expect(written).toEqual([[1, 2, 3], [4]]);
    await expect(b.add(row(5), 1_000)).rejects.toBeInstanceOf(WriteBehindClosedError);
  });

  it('close gives up at its deadline on a store that keeps failing, and says how many rows it could not write', async () => {
    const b = batcher(async () => {
      throw new Error('connection refused');
    });
    await b.add(row(1), 1_000);
    await b.add(row(2), 1_000);
    const closing = b.close(1_000);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(await closing).toBe(2);
  });

  it('close lets no waiting writer in', async () => {
    const { write, calls } = controlledWrite();
    const b = batcher(write);
    for (const n of [1, 2, 3, 4, 5]) await b.add(row(n), 1_000);
    const waiting = b.add(row(6), 10_000).catch((err: unknown) => err);
    const closing = b.close(5_000);
    expect(await waiting).toBeInstanceOf(WriteBehindClosedError);
    calls[0]!.resolve();
    await vi.advanceTimersByTimeAsync(0);
    calls[1]!.resolve();
    expect(await closing).toBe(0);
    expect(calls.flatMap((c) => c.rows.map((r) => r.n))).toEqual([1, 2, 3, 4, 5]);
  });
});
