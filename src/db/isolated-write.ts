import { classifyWriteFailure, PostgresRejectedError } from './postgres-error.js';

/** A row Postgres refused for good, with why. */
export interface RejectedRow<T> {
  item: T;
  error: PostgresRejectedError;
}

/**
 * Everything was written except `rejected` (in input order), which the caller must set aside.
 * `wroteSome`: at least one write succeeded, which proves the statement and schema sound.
 */
export interface WrittenRows<T, R> {
  outcome: 'written';
  results: R[];
  rejected: RejectedRow<T>[];
  wroteSome: boolean;
}

export type IsolatedWrite<T, R> =
  | WrittenRows<T, R>
  /** The caller gave up while waiting (its partition went elsewhere); nothing may be committed. */
  | { outcome: 'abandoned' };

export interface WritePause {
  /** Failed tries in a row, from 1. */
  attempt: number;
  waitMs: number;
  /**
   * `transient`: Postgres is unavailable or busy. `systemic`: every row failed, and at least one
   * with an error that does not blame its data (a missing table, a permission): the statement or
   * the schema is at fault, so the rows are retried rather than set aside.
   */
  cause: 'transient' | 'systemic';
  error: unknown;
  /** Rows in the write that failed. */
  rows: number;
}

export interface IsolatedWriteDeps<T, R> {
  /** Writes the rows in one transaction: all of them or none. Resolves to what the caller wants back. */
  apply(rows: readonly T[]): Promise<readonly R[]>;
  /** Waits out a failure before the next try; resolves false when the caller gives up. */
  pause(p: WritePause): Promise<boolean>;
}

const BASE_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 5_000;

/** Exponential from 100 ms, capped at 5 s. */
export function writeBackoffMs(attempt: number): number {
  return Math.min(MAX_BACKOFF_MS, BASE_BACKOFF_MS * 2 ** Math.max(0, attempt - 1));
}

interface Failed {
  index: number;
  error: unknown;
}

/**
 * Writes a batch so that one row Postgres refuses cannot hold back the others. A transient
 * failure is waited out and the same write tried again. A permanent one splits the write in
 * halves, down to single rows, so every row that can be written is, and the rows that fail alone
 * are found:
 * - one failing with a data error (`classifyWriteFailure` → `data`) is rejected: its values are
 *   the fault;
 * - one failing with another permanent error is rejected only if some row of the batch was
 *   written, proving the statement and the schema sound; when none was, the failure is systemic
 *   (a bad deploy dropped a table, say) and those rows are retried after a pause, for as long as
 *   it lasts, rather than dead-lettered wholesale. `provenSound` says an earlier write of the
 *   same statement succeeded, which counts as a row written.
 * Rows are tried in input order, and a write that succeeded is not sent again (a commit whose
 * answer was lost is: the stores are idempotent for that reason).
 */
export async function writeIsolatingRejects<T, R>(rows: readonly T[], deps: IsolatedWriteDeps<T, R>, opts: { provenSound?: boolean } = {}): Promise<IsolatedWrite<T, R>> {
  const results: R[] = [];
  const rejected: Failed[] = [];
  let suspects: Failed[] = [];
  let wroteSome = false;
  let provenSound = opts.provenSound ?? false;
  let failuresInARow = 0;
  const pending: number[][] = rows.length > 0 ? [rows.map((_, i) => i)] : [];
  const pause = (cause: WritePause['cause'], error: unknown, count: number) => {
    failuresInARow += 1;
    return deps.pause({ attempt: failuresInARow, waitMs: writeBackoffMs(failuresInARow), cause, error, rows: count });
  };

  while (pending.length > 0) {
    const batch = pending.shift()!;
    try {
      results.push(...(await deps.apply(batch.map((i) => rows[i]!))));
      wroteSome = true;
      provenSound = true;
      failuresInARow = 0;
    } catch (error) {
      const kind = classifyWriteFailure(error);
      if (kind === 'transient') {
        if (!(await pause('transient', error, batch.length))) return { outcome: 'abandoned' };
        pending.unshift(batch);
      } else if (batch.length > 1) {
        const half = Math.ceil(batch.length / 2);
        pending.unshift(batch.slice(0, half), batch.slice(half));
      } else {
        (kind === 'data' ? rejected : suspects).push({ index: batch[0]!, error });
      }
    }
    if (pending.length > 0 || suspects.length === 0) continue;
    if (provenSound) {
      rejected.push(...suspects);
    } else {
      if (!(await pause('systemic', suspects[0]!.error, suspects.length))) return { outcome: 'abandoned' };
      pending.push(suspects.map((s) => s.index));
    }
    suspects = [];
  }

  rejected.sort((a, b) => a.index - b.index);
  return { outcome: 'written', results, rejected: rejected.map((r) => ({ item: rows[r.index]!, error: new PostgresRejectedError(r.error) })), wroteSome };
}
