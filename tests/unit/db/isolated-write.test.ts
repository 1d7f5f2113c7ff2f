import { describe, expect, it } from 'vitest';
import { writeBackoffMs, writeIsolatingRejects, type WritePause } from '../../../src/db/isolated-write.js';
import { PostgresRejectedError } from '../../../src/db/postgres-error.js';
import { connectionRefused, serverError } from '../../support/postgres-errors.js';

/**
 * A table that writes rows all or nothing, as a transaction does: a row listed in `refuse` fails
 * any write it is part of with that error; `before` can fail a write first (an outage).
 */
function fakeTable(refuse: Record<string, unknown> = {}, before?: (rows: readonly string[], call: number) => unknown) {
  const written: string[] = [];
  const calls: string[][] = [];
  const pauses: WritePause[] = [];
  let keepWaiting = (_p: WritePause) => true;
  const deps = {
    apply: async (rows: readonly string[]) => {
      calls.push([...rows]);
      const outage = before?.(rows, calls.length);
      if (outage) throw outage;
      const bad = rows.find((r) => r in refuse);
      if (bad !== undefined) throw refuse[bad];
      written.push(...rows);
      return rows.map((r) => r.toUpperCase());
    },
    pause: async (p: WritePause) => {
      pauses.push(p);
      return keepWaiting(p);
    },
  };
  return { deps, written, calls, pauses, giveUpWhen: (f: (p: WritePause) => boolean) => (keepWaiting = (p) => !f(p)) };
}

const rows = (n: number) => Array.from({ length: n }, (_, i) => `r${i}`);

describe('writeIsolatingRejects', () => {
  it('writes a clean batch in one write', async () => {
    const t = fakeTable();
    const out = await writeIsolatingRejects(rows(5), t.deps);
    expect(out).toEqual({ outcome: 'written', results: ['R0', 'R1', 'R2', 'R3', 'R4'], rejected: [], wroteSome: true });
    expect(t.calls).toHaveLength(1);
    expect(t.pauses).toEqual([]);
  });

  it('does nothing for an empty batch', async () => {
    const t = fakeTable();
    expect(await writeIsolatingRejects([], t.deps)).toEqual({ outcome: 'written', results: [], rejected: [], wroteSome: false });
    expect(t.calls).toEqual([]);
  });

  it('sets aside the one row Postgres refuses and writes every other row once, in order', async () => {
    const t = fakeTable({ r5: serverError('22P05') });
    const out = await writeIsolatingRejects(rows(8), t.deps);
    expect(out.outcome).toBe('written');
    if (out.outcome !== 'written') return;
    expect(out.rejected.map((r) => r.item)).toEqual(['r5']);
    expect(t.written).toEqual(['r0', 'r1', 'r2', 'r3', 'r4', 'r6', 'r7']);
    expect(out.results).toEqual(['R0', 'R1', 'R2', 'R3', 'R4', 'R6', 'R7']);
    // The whole batch, then halving down to the row: 1 + 2 per level.
    expect(t.calls).toHaveLength(1 + 2 * 3);
    expect(t.pauses).toEqual([]);
  });

  it('names the SQLSTATE and message of each rejection', async () => {
    const t = fakeTable({ r0: serverError('22008') });
    const out = await writeIsolatingRejects(['r0'], t.deps);
    if (out.outcome !== 'written') throw new Error(out.outcome);
    expect(out.rejected[0]!.error).toBeInstanceOf(PostgresRejectedError);
    expect(out.rejected[0]!.error.message).toBe('SQLSTATE 22008: server said 22008');
    expect(out.rejected[0]!.error.sqlState).toBe('22008');
  });

  it.each([
    [['r0'], 7],
    [['r6'], 7],
    [['r0', 'r6'], 7],
    [['r2', 'r3'], 7],
    [['r1', 'r2', 'r3', 'r4', 'r5'], 7],
  ])('isolates refused rows %j among 7', async (bad, n) => {
    const t = fakeTable(Object.fromEntries(bad.map((r) => [r, serverError('23505')])));
    const out = await writeIsolatingRejects(rows(n), t.deps);
    if (out.outcome !== 'written') throw new Error(out.outcome);
    expect(out.rejected.map((r) => r.item)).toEqual(bad);
    expect(t.written).toEqual(rows(n).filter((r) => !bad.includes(r)));
    expect(t.pauses).toEqual([]);
  });

  it('rejects every row when every row has a data error, a lone row included: the values are at fault', async () => {
    const all = fakeTable(Object.fromEntries(rows(4).map((r) => [r, serverError('22P02')])));
    const out = await writeIsolatingRejects(rows(4), all.deps);
    if (out.outcome !== 'written') throw new Error(out.outcome);
    expect(out.rejected.map((r) => r.item)).toEqual(rows(4));
    expect(out.results).toEqual([]);
    const lone = fakeTable({ r0: serverError('54001') });
    const one = await writeIsolatingRejects(['r0'], lone.deps);
    expect(one.outcome === 'written' && one.rejected.map((r) => r.item)).toEqual(['r0']);
    expect(lone.pauses).toEqual([]);
  });

  it('rejects a row failing with a non-data error when its neighbours were written', async () => {
    const t = fakeTable({ r2: new TypeError('cannot serialize a value') });
    const out = await writeIsolatingRejects(rows(4), t.deps);
    if (out.outcome !== 'written') throw new Error(out.outcome);
    expect(out.rejected.map((r) => [r.item, r.error.message])).toEqual([['r2', 'no SQLSTATE: cannot serialize a value']]);
    expect(t.written).toEqual(['r0', 'r1', 'r3']);
  });

  it('retries, never rejects, when every row fails with a non-data error (a bad deploy), until told to give up', async () => {
    const t = fakeTable(Object.fromEntries(rows(4).map((r) => [r, serverError('42P01')])));
    t.giveUpWhen((p) => p.attempt === 3);
    const out = await writeIsolatingRejects(rows(4), t.deps);
    expect(out).toEqual({ outcome: 'abandoned' });
    expect(t.pauses.map((p) => [p.cause, p.attempt, p.waitMs, p.rows])).toEqual([
      ['systemic', 1, 100, 4],
      ['systemic', 2, 200, 4],
      ['systemic', 3, 400, 4],
    ]);
    expect(t.written).toEqual([]);
  });

  it('a lone row with a non-data error is systemic too: nothing proves the statement sound', async () => {
    const t = fakeTable({ r0: serverError('42501') });
    t.giveUpWhen((p) => p.attempt === 2);
    expect(await writeIsolatingRejects(['r0'], t.deps)).toEqual({ outcome: 'abandoned' });
    expect(t.pauses.map((p) => p.cause)).toEqual(['systemic', 'systemic']);
  });

  it('rejects a lone row with a non-data error when an earlier write of the statement proved it sound', async () => {
    const t = fakeTable({ r0: new TypeError('cannot serialize a value') });
    const out = await writeIsolatingRejects(['r0'], t.deps, { provenSound: true });
    expect(out.outcome === 'written' && [out.rejected.map((r) => r.item), out.wroteSome]).toEqual([['r0'], false]);
    expect(t.pauses).toEqual([]);
  });

  it('says whether anything was written', async () => {
    const t = fakeTable({ r0: serverError('22P05'), r1: serverError('22P05') });
    const out = await writeIsolatingRejects(rows(2), t.deps);
    expect(out.outcome === 'written' && out.wroteSome).toBe(false);
  });

  it('writes everything once the systemic fault is repaired', async () => {
    const missingTable = serverError('42P01');
    const t = fakeTable({}, (_rows, call) => (call <= 7 ? missingTable : undefined));
    const out = await writeIsolatingRejects(rows(4), t.deps);
    expect(out).toEqual({ outcome: 'written', results: ['R0', 'R1', 'R2', 'R3'], rejected: [], wroteSome: true });
    expect(t.pauses.map((p) => p.cause)).toEqual(['systemic']);
    expect(t.written).toEqual(rows(4));
  });

  it('sets aside the data-error rows and retries the rest when the rest fail systemically', async () => {
    const t = fakeTable({ r0: serverError('22P05'), r1: serverError('42P01'), r2: serverError('42P01') });
    t.giveUpWhen((p) => p.attempt === 1);
    expect(await writeIsolatingRejects(rows(3), t.deps)).toEqual({ outcome: 'abandoned' });
    expect(t.pauses[0]).toMatchObject({ cause: 'systemic', rows: 2 });
  });

  it('waits out a transient failure and writes the same rows, with growing pauses', async () => {
    const t = fakeTable({}, (_rows, call) => (call <= 3 ? connectionRefused() : undefined));
    const out = await writeIsolatingRejects(rows(3), t.deps);
    expect(out).toEqual({ outcome: 'written', results: ['R0', 'R1', 'R2'], rejected: [], wroteSome: true });
    expect(t.pauses.map((p) => [p.cause, p.attempt, p.waitMs, p.rows])).toEqual([
      ['transient', 1, 100, 3],
      ['transient', 2, 200, 3],
      ['transient', 3, 400, 3],
    ]);
    expect(t.calls).toEqual([rows(3), rows(3), rows(3), rows(3)]);
  });

  it('never rejects a row over a transient failure, even one that strikes mid-split', async () => {
    // r3 is refused; the outage hits while the halves are being tried.
    const t = fakeTable({ r3: serverError('22007') }, (_rows, call) => (call === 3 || call === 4 ? serverError('57P01') : undefined));
    const out = await writeIsolatingRejects(rows(4), t.deps);
    if (out.outcome !== 'written') throw new Error(out.outcome);
    expect(out.rejected.map((r) => r.item)).toEqual(['r3']);
    expect(t.written).toEqual(['r0', 'r1', 'r2']);
    expect(t.pauses.map((p) => [p.cause, p.attempt])).toEqual([
      ['transient', 1],
      ['transient', 2],
    ]);
  });

  it('starts the pauses over after a write succeeds', async () => {
    const t = fakeTable({ r1: serverError('22P02') }, (_rows, call) => (call === 2 || call === 4 ? connectionRefused() : undefined));
    await writeIsolatingRejects(rows(2), t.deps);
    expect(t.pauses.map((p) => p.attempt)).toEqual([1, 1]);
  });

  it('gives up when told to during an outage, having rejected nothing', async () => {
    const t = fakeTable({}, () => connectionRefused());
    t.giveUpWhen(() => true);
    expect(await writeIsolatingRejects(rows(3), t.deps)).toEqual({ outcome: 'abandoned' });
    expect(t.calls).toHaveLength(1);
  });

  it('collects what each write resolves to, as the writes went', async () => {
    const t = fakeTable({ r1: serverError('23514') });
    const deps = { ...t.deps, apply: async (r: readonly string[]) => (await t.deps.apply(r)).filter((x) => x !== 'R2') };
    const out = await writeIsolatingRejects(rows(4), deps);
    expect(out.outcome === 'written' && out.results).toEqual(['R0', 'R3']);
  });
});

describe('writeBackoffMs', () => {
  it.each([
    [0, 100],
    [1, 100],
    [2, 200],
    [3, 400],
    [6, 3_200],
    [7, 5_000],
    [60, 5_000],
    [5_000, 5_000],
  ])('attempt %i waits %i ms', (attempt, ms) => {
    expect(writeBackoffMs(attempt)).toBe(ms);
  });
});
