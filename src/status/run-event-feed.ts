import type pg from 'pg';
import type { Logger } from '../obs/logger.js';
import { RUN_EVENTS_CHANNEL } from './run-store.js';

/** What the feed needs of a pg client; a new, unconnected one per (re)connection. */
export type ListenConnection = Pick<pg.Client, 'connect' | 'query' | 'end' | 'on'>;

export interface RunEventFeedOptions {
  connect: () => ListenConnection;
  logger: Logger;
  /** Subscriptions held at once; `subscribe` refuses beyond it. */
  maxSubscribers?: number;
  initialBackoffMs?: number;
  maxBackoffMs?: number;
}

const DEFAULT_MAX_SUBSCRIBERS = 1_000;

/**
 * Wakes the SSE streams of a run when the status sink commits new `run_events` rows. One
 * dedicated connection LISTENs for the whole process (a pooled connection cannot: the pool would
 * hand it to other queries and recycle it) and fans notifications out by run id. Notifications
 * carry no data: a woken stream reads Postgres, which stays the only source of events.
 */
export class RunEventFeed {
  private readonly subscribers = new Map<string, Set<() => void>>();
  private count = 0;
  private client: ListenConnection | undefined;
  private connecting: Promise<void> | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private failures = 0;
  private closed = false;
  private readonly log: Logger;
  private readonly maxSubscribers: number;

  constructor(private readonly opts: RunEventFeedOptions) {
    this.log = opts.logger.child({ component: 'run-event-feed' });
    this.maxSubscribers = opts.maxSubscribers ?? DEFAULT_MAX_SUBSCRIBERS;
  }

  /** Resolves after the first attempt; if it failed, the feed keeps reconnecting in the background. */
  start(): Promise<void> {
    this.connecting = this.connect();
    return this.connecting;
  }

  /**
   * Calls `wake` whenever the run may have new events, and also after a reconnection (what was
   * announced meanwhile is lost). Returns the unsubscribe function, or undefined when full.
   */
  subscribe(runId: string, wake: () => void): (() => void) | undefined {
    if (this.count >= this.maxSubscribers) return undefined;
    const set = this.subscribers.get(runId) ?? new Set<() => void>();
    this.subscribers.set(runId, set);
    // A wrapper per call, so one function subscribed twice is two subscriptions.
    const entry = () => wake();
    set.add(entry);
    this.count++;
    return () => {
      if (!set.delete(entry)) return;
      this.count--;
      if (set.size === 0 && this.subscribers.get(runId) === set) this.subscribers.delete(runId);
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    await this.connecting;
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }

  private async connect(): Promise<void> {
    const client = this.opts.connect();
    let lost = false;
    const onLost = (err?: Error) => {
      if (lost || this.closed) return;
      lost = true;
      if (this.client === client) this.client = undefined;
      void client.end().catch(() => undefined);
      this.scheduleReconnect(err);
    };
    client.on('error', onLost);
    client.on('end', () => onLost());
    client.on('notification', (msg) => {
      if (msg.payload) this.wake(this.subscribers.get(msg.payload));
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${RUN_EVENTS_CHANNEL}`);
    } catch (err) {
      if (this.closed) await client.end().catch(() => undefined);
      else onLost(err as Error);
      return;
    }
    if (lost) return;
    if (this.closed) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    if (this.failures > 0) this.log.info({ failures: this.failures }, 'listening for run events again');
    this.failures = 0;
    for (const set of this.subscribers.values()) this.wake(set);
  }

  private scheduleReconnect(err: Error | undefined): void {
    if (this.closed) return;
    const base = Math.min(this.opts.maxBackoffMs ?? 5_000, (this.opts.initialBackoffMs ?? 200) * 2 ** this.failures++);
    // Half-jittered, so API instances do not reconnect in step after a Postgres restart.
    const waitMs = Math.round(base / 2 + (Math.random() * base) / 2);
    this.log.warn({ err, waitMs, failures: this.failures }, 'run event listener lost its Postgres connection; streams fall back to polling until it is back');
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      this.connecting = this.connect();
    }, waitMs);
  }

  private wake(set: Set<() => void> | undefined): void {
    if (set) for (const wake of [...set]) wake();
  }
}
