/**
 * Write-behind for rows whose writer must not wait on the store: `add` queues a row and returns,
 * rows are written in batches of up to `maxBatch`, at most `maxWaitMs` after the first of a batch
 * was queued (or at once when the batch is full), one write at a time. Rows queued while a write
 * is in flight form the next batch, so a slow store makes batches bigger rather than queues longer.
 *
 * Bounded: at most `maxPending` rows are queued or being written; `add` past that waits for a
 * write to make room (backpressure), for at most its own timeout, and a row is never dropped once
 * queued. A failed write is retried with backoff, the same rows again, until it succeeds or
 * `close` gives up at its deadline. Queued and in-flight rows can be looked up by key meanwhile.
 */

export interface WriteBehindOptions<T> {
  /** Writes all the rows or throws; called with one batch at a time. */
  write: (rows: readonly T[]) => Promise<void>;
  /** The row's identity, for `get`; two rows with the same key are both written. */
  key: (row: T) => string;
  maxBatch: number;
  maxWaitMs: number;
  maxPending: number;
  /** The wait before the `attempt`th retry of a failed write (from 1). */
  backoffMs: (attempt: number) => number;
  /** After each write that succeeded: its rows and how long it took, retries included. */
  onWritten?: (rows: number, seconds: number) => void;
  /** After each failed try, before waiting `waitMs`. */
  onFailure?: (err: unknown, attempt: number, rows: number, waitMs: number) => void;
  /** Whenever the count of rows queued or being written changes. */
  onPending?: (pending: number) => void;
}

export class WriteBehindTimeoutError extends Error {
  override readonly name = 'WriteBehindTimeoutError';
  constructor(timeoutMs: number, pending: number) {
    super(`no room in the write-behind buffer (${pending} rows pending) within ${timeoutMs} ms`);
  }
}

export class WriteBehindClosedError extends Error {
  override readonly name = 'WriteBehindClosedError';
  constructor() {
    super('the write-behind buffer is closed');
  }
}

interface RoomWaiter {
  resolve: () => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

export class WriteBehindBatcher<T> {
  /** Rows not yet handed to a write, oldest first. */
  private queue: T[] = [];
  /** Rows queued or being written, by key: what `get` answers from. */
  private readonly byKey = new Map<string, T[]>();
  private count = 0;
  /** Room promised to waiters let in, not yet taken by their rows. */
  private reserved = 0;
  private readonly roomWaiters: RoomWaiter[] = [];
  private waitTimer: NodeJS.Timeout | undefined;
  private writing: Promise<void> | undefined;
  private closed = false;
  /** Set by `close` once its deadline passed: a failing write stops retrying. */
  private givenUp = false;
  private readonly wakeRetry = new Set<() => void>();

  constructor(private readonly opts: WriteBehindOptions<T>) {}

  /** Rows queued or being written. */
  get pending(): number {
    return this.count;
  }

  /** The latest row with this key still queued or being written. */
  get(key: string): T | undefined {
    return this.byKey.get(key)?.at(-1);
  }

  /**
   * Queues the row. Resolves at once while there is room; otherwise once a write made room, or
   * rejects with WriteBehindTimeoutError after `timeoutMs` (the row is then not queued).
   */
  async add(row: T, timeoutMs: number): Promise<void> {
    if (this.closed) throw new WriteBehindClosedError();
    if (this.count + this.reserved >= this.opts.maxPending || this.roomWaiters.length > 0) {
      await this.waitForRoom(timeoutMs);
      this.reserved--;
      if (this.closed) throw new WriteBehindClosedError();
    }
    this.queue.push(row);
    const k = this.opts.key(row);
    const same = this.byKey.get(k);
    if (same) same.push(row);
    else this.byKey.set(k, [row]);
    this.setCount(this.count + 1);
    this.schedule();
  }

  /**
   * Stops taking rows and writes what is pending, retrying failures until `deadlineMs` from now.
   * Resolves with the rows it could not write (0 when everything was written).
   */
  async close(deadlineMs: number): Promise<number> {
    this.closed = true;
    for (const w of this.roomWaiters.splice(0)) {
      clearTimeout(w.timer);
      w.reject(new WriteBehindClosedError());
    }
    const deadline = setTimeout(() => {
      this.givenUp = true;
      for (const wake of this.wakeRetry) wake();
    }, deadlineMs);
    try {
      while (!this.givenUp && (this.writing || this.queue.length > 0)) {
        this.schedule();
        await this.writing;
      }
      // A write in flight at the deadline ends at its next failure (or succeeds).
      await this.writing;
    } finally {
      clearTimeout(deadline);
    }
    return this.count;
  }

  private waitForRoom(timeoutMs: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const waiter: RoomWaiter = {
        resolve,
        reject,
        timer: setTimeout(() => {
          const i = this.roomWaiters.indexOf(waiter);
          if (i >= 0) this.roomWaiters.splice(i, 1);
          reject(new WriteBehindTimeoutError(timeoutMs, this.count));
        }, timeoutMs),
      };
      this.roomWaiters.push(waiter);
    });
  }

  private setCount(n: number): void {
    this.count = n;
    this.opts.onPending?.(n);
  }

  private schedule(): void {
    if (this.writing || this.queue.length === 0) return;
    if (this.queue.length >= this.opts.maxBatch || this.opts.maxWaitMs === 0 || this.closed) {
      this.startWrite();
      return;
    }
    this.waitTimer ??= setTimeout(() => this.startWrite(), this.opts.maxWaitMs);
  }

  private startWrite(): void {
    clearTimeout(this.waitTimer);
    this.waitTimer = undefined;
    if (this.writing || this.queue.length === 0) return;
    const batch = this.queue.splice(0, this.opts.maxBatch);
    this.writing = this.writeUntilDone(batch).finally(() => {
      this.writing = undefined;
      this.schedule();
    });
  }

  private async writeUntilDone(batch: T[]): Promise<void> {
    const started = process.hrtime.bigint();
    for (let attempt = 1; ; attempt++) {
      try {
        await this.opts.write(batch);
        break;
      } catch (err) {
        const waitMs = this.opts.backoffMs(attempt);
        this.opts.onFailure?.(err, attempt, batch.length, waitMs);
        if (this.givenUp) return;
        await this.sleep(waitMs);
        if (this.givenUp) return;
      }
    }
    this.opts.onWritten?.(batch.length, Number(process.hrtime.bigint() - started) / 1e9);
    for (const row of batch) {
      const k = this.opts.key(row);
      const same = this.byKey.get(k);
      if (!same) continue;
      same.splice(same.indexOf(row), 1);
      if (same.length === 0) this.byKey.delete(k);
    }
    this.setCount(this.count - batch.length);
    this.letWaitersIn();
  }

  /** Lets in as many waiting writers as there is room, oldest first. */
  private letWaitersIn(): void {
    while (this.count + this.reserved < this.opts.maxPending && this.roomWaiters.length > 0) {
      const w = this.roomWaiters.shift()!;
      clearTimeout(w.timer);
      this.reserved++;
      w.resolve();
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.wakeRetry.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.wakeRetry.add(wake);
    });
  }
}
