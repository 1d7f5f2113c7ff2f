/**
 * Groups concurrent produce calls into one Kafka request (what the Java client calls linger),
 * with one request in flight at a time so the idempotent producer keeps per-key order.
 * Everything is bounded: the queue refuses new work when full, and every call has a deadline.
 */

export interface OutgoingMessage {
  topic: string;
  key: string;
  value: Buffer;
  headers?: Record<string, string>;
}

export type SendBatch = (messages: OutgoingMessage[]) => Promise<void>;

export interface ProduceBatcherOptions {
  maxBatch: number;
  lingerMs: number;
  maxPending: number;
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

interface Pending {
  message: OutgoingMessage;
  resolve: () => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
  sent: boolean;
}

export class ProduceBatcher {
  private queue: Pending[] = [];
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
    if (this.queue.length >= this.opts.maxPending) return Promise.reject(new ProduceQueueFullError(this.queue.length));
    return new Promise<void>((resolve, reject) => {
      const entry: Pending = {
        message,
        resolve,
        reject,
        sent: false,
        timer: setTimeout(() => this.expire(entry, timeoutMs), timeoutMs),
      };
      this.queue.push(entry);
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
    if (idx >= 0) this.queue.splice(idx, 1);
    this.settle(entry, new ProduceTimeoutError(timeoutMs, entry.sent));
  }

  private schedule(): void {
    if (this.inFlight || this.queue.length === 0) return;
    const full = this.queue.length >= this.opts.maxBatch;
    if (full || this.opts.lingerMs === 0 || this.closed) {
      void this.flush();
      return;
    }
    this.lingerTimer ??= setTimeout(() => {
      this.lingerTimer = undefined;
      void this.flush();
    }, this.opts.lingerMs);
  }

  private async flush(): Promise<void> {
    clearTimeout(this.lingerTimer);
    this.lingerTimer = undefined;
    if (this.inFlight || this.queue.length === 0) return;
    this.inFlight = true;
    const batch = this.queue.splice(0, this.opts.maxBatch);
    for (const e of batch) e.sent = true;
    try {
      await this.send(batch.map((e) => e.message));
      for (const e of batch) this.settle(e);
    } catch (err) {
      for (const e of batch) this.settle(e, err as Error);
    } finally {
      this.inFlight = false;
      this.schedule();
    }
  }
}
