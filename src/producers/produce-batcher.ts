/**
 * Groups concurrent produce calls into one Kafka request (what the Java client calls linger),
 * with one request in flight at a time so the idempotent producer keeps per-key order.
 * Everything is bounded: the queue refuses new work when full, every call has a deadline, and a
 * request carries at most `maxBatch` messages and `maxBatchBytes` bytes, so the broker's limit on
 * one partition's record batch (message.max.bytes) is never exceeded by putting records together.
 */

export interface OutgoingMessage {
  topic: string;
  key: string;
  value: Buffer;
  headers?: Record<string, string>;
}

/**
 * Sends one request's messages; resolves once Kafka answered, with the error of each message it
 * did not acknowledge (by position; none, or undefined, where it did), or rejects for them all.
 */
export type SendBatch = (messages: OutgoingMessage[]) => Promise<readonly (Error | undefined)[] | void>;

export interface ProduceBatcherOptions {
  maxBatch: number;
  /** Bytes of one request's records as `recordBytes` counts them; a larger record is refused. */
  maxBatchBytes: number;
  lingerMs: number;
  maxPending: number;
}

/**
 * Per record in a v2 record batch, at most: length, attributes, timestamp delta, offset delta,
 * key length, value length and header count (varints), and per header its key and value lengths.
 */
export const RECORD_OVERHEAD_BYTES = 40;
export const HEADER_OVERHEAD_BYTES = 10;

/** What one message adds to a record batch: key, value and headers, and their framing at its largest. */
export function recordBytes(message: OutgoingMessage): number {
  let bytes = RECORD_OVERHEAD_BYTES + Buffer.byteLength(message.key) + message.value.length;
  for (const [k, v] of Object.entries(message.headers ?? {})) bytes += HEADER_OVERHEAD_BYTES + Buffer.byteLength(k) + Buffer.byteLength(v);
  return bytes;
}

/** One message that no request could carry: refused before it is queued, so nothing else waits on it. */
export class MessageTooLargeError extends Error {
  constructor(
    readonly bytes: number,
    readonly limit: number,
  ) {
    super(`message of ${bytes} bytes is over the ${limit}-byte bound of one Kafka produce request`);
    this.name = 'MessageTooLargeError';
  }
}

export class ProduceQueueFullError extends Error {
  constructor(pending: number) {
    super(`produce queue is full (${pending} messages waiting for Kafka)`);
    this.name = 'ProduceQueueFullError';
  }
}

/** `maybeProduced` is false when the message was withdrawn before it was handed to Kafka. */
export class ProduceTimeoutError extends Error {
  constructor(
    readonly timeoutMs: number,
    readonly maybeProduced: boolean,
  ) {
    super(`Kafka did not acknowledge within ${timeoutMs} ms${maybeProduced ? '' : ' (message withdrawn, never sent)'}`);
    this.name = 'ProduceTimeoutError';
  }
}

export class ProducerClosedError extends Error {
  constructor() {
    super('producer is closed');
    this.name = 'ProducerClosedError';
  }
}

/**
 * Whether a failed produce may still have put its message in Kafka: only a message refused or
 * withdrawn before it was handed to the client certainly did not get there.
 */
export function mayHaveReachedKafka(err: unknown): boolean {
  if (err instanceof ProduceQueueFullError || err instanceof MessageTooLargeError || err instanceof ProducerClosedError) return false;
  if (err instanceof ProduceTimeoutError) return err.maybeProduced;
  return true;
}

interface Pending {
  message: OutgoingMessage;
  bytes: number;
  resolve: () => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
  sent: boolean;
}

export class ProduceBatcher {
  private queue: Pending[] = [];
  /** Sum of `bytes` over the queue. */
  private queuedBytes = 0;
  /** Every caller still waiting, queued or in flight: what close() waits for. */
  private readonly unsettled = new Set<Pending>();
  private readonly settledWaiters: (() => void)[] = [];
  private inFlight = false;
  private lingerTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly send: SendBatch,
    private readonly opts: ProduceBatcherOptions,
  ) {}

  get pending(): number {
    return this.queue.length;
  }

  produce(message: OutgoingMessage, timeoutMs: number): Promise<void> {
    if (this.closed) return Promise.reject(new ProducerClosedError());
    const bytes = recordBytes(message);
    if (bytes > this.opts.maxBatchBytes) return Promise.reject(new MessageTooLargeError(bytes, this.opts.maxBatchBytes));
    if (this.queue.length >= this.opts.maxPending) return Promise.reject(new ProduceQueueFullError(this.queue.length));
    return new Promise<void>((resolve, reject) => {
      const entry: Pending = {
        message,
        bytes,
        resolve,
        reject,
        sent: false,
        timer: setTimeout(() => this.expire(entry, timeoutMs), timeoutMs),
      };
      this.queue.push(entry);
      this.queuedBytes += bytes;
      this.unsettled.add(entry);
      this.schedule();
    });
  }

  /**
   * Stops taking messages, sends what is queued without lingering, and resolves once every caller
   * has its answer — which each caller's own timeout bounds, even if Kafka never answers.
   */
  async close(): Promise<void> {
    this.closed = true;
    this.schedule();
    if (this.unsettled.size === 0) return;
    await new Promise<void>((resolve) => this.settledWaiters.push(resolve));
  }

  private settle(entry: Pending, err?: Error): void {
    if (!this.unsettled.delete(entry)) return;
    clearTimeout(entry.timer);
    if (err) entry.reject(err);
    else entry.resolve();
    if (this.unsettled.size === 0) for (const w of this.settledWaiters.splice(0)) w();
  }

  private expire(entry: Pending, timeoutMs: number): void {
    const idx = this.queue.indexOf(entry);
    if (idx >= 0) {
      this.queue.splice(idx, 1);
      this.queuedBytes -= entry.bytes;
    }
    this.settle(entry, new ProduceTimeoutError(timeoutMs, entry.sent));
  }

  private schedule(): void {
    if (this.inFlight || this.queue.length === 0) return;
    // Lingering cannot grow a batch that is already at a bound.
    const full = this.queue.length >= this.opts.maxBatch || this.queuedBytes >= this.opts.maxBatchBytes;
    if (full || this.opts.lingerMs === 0 || this.closed) {
      void this.flush();
      return;
    }
    this.lingerTimer ??= setTimeout(() => {
      this.lingerTimer = undefined;
      void this.flush();
    }, this.opts.lingerMs);
  }

  /**
   * How many messages from the head of the queue fit one request: never fewer than one (a queued
   * message fits alone), and never skipping one, so messages keep their order.
   */
  private batchLength(): number {
    let n = 0;
    let bytes = 0;
    for (const e of this.queue) {
      if (n === this.opts.maxBatch || (n > 0 && bytes + e.bytes > this.opts.maxBatchBytes)) break;
      bytes += e.bytes;
      n++;
    }
    return n;
  }

  private async flush(): Promise<void> {
    clearTimeout(this.lingerTimer);
    this.lingerTimer = undefined;
    if (this.inFlight || this.queue.length === 0) return;
    this.inFlight = true;
    const batch = this.queue.splice(0, this.batchLength());
    for (const e of batch) {
      e.sent = true;
      this.queuedBytes -= e.bytes;
    }
    try {
      const failures = await this.send(batch.map((e) => e.message));
      batch.forEach((e, i) => this.settle(e, failures?.[i]));
    } catch (err) {
      for (const e of batch) this.settle(e, err as Error);
    } finally {
      this.inFlight = false;
      this.schedule();
    }
  }
}
