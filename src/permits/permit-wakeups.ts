import type { RedisClient } from '../redis/client.js';
import { ShardedSubscriber } from '../redis/sharded-subscriber.js';
import type { Logger } from '../obs/logger.js';

/**
 * Called with the scope names a release gave back, or with null when anything may have changed
 * (the subscriber reconnected, and what was announced meanwhile is lost).
 */
export type WakeListener = (released: readonly string[] | null) => void;

export interface PermitWakeupsOptions {
  /** The sharded channel permits-release.lua publishes on (`redisKeys(ns).permitReleased()`). */
  channel: string;
  logger: Logger;
  /** How often waiters should retry without an announcement; clamped to 50 ms – 5 s. */
  fallbackPollMs?: number;
}

const MIN_POLL_MS = 50;
const MAX_POLL_MS = 5_000;
const DEFAULT_POLL_MS = 1_000;

/**
 * Lets processors waiting for a permit retry when one is released, instead of busy polling. One
 * subscriber connection per process fans the announcements out. Announcements are fire-and-forget
 * and a lapsed lease (a crashed holder) announces nothing, so waiters must also retry every
 * `fallbackPollMs` on their own: a lost wake-up then delays a waiter, never strands it.
 */
export class PermitWakeups {
  readonly fallbackPollMs: number;
  private readonly subscriber: ShardedSubscriber;
  private readonly listeners = new Set<WakeListener>();
  private readonly log: Logger;

  constructor(redis: RedisClient, opts: PermitWakeupsOptions) {
    this.fallbackPollMs = Math.min(MAX_POLL_MS, Math.max(MIN_POLL_MS, Math.round(opts.fallbackPollMs ?? DEFAULT_POLL_MS)));
    this.log = opts.logger.child({ component: 'permit-wakeups' });
    this.subscriber = new ShardedSubscriber(redis, [opts.channel], {
      message: (payload) => this.wake(payload.split(' ')),
      // Announcements made while the subscriber was away are lost.
      ready: () => this.wake(null),
      error: (err) => this.log.warn({ err }, 'permit wake-up subscriber error; waiters fall back to polling'),
    });
  }

  /** Resolves once subscribed; rejects if Redis cannot be reached or is older than 7. */
  async start(): Promise<void> {
    await this.subscriber.start();
  }

  /** Calls `listener` on every wake-up until the returned function is called. */
  onWake(listener: WakeListener): () => void {
    // A wrapper per call, so one function registered twice is two registrations.
    const entry: WakeListener = (released) => listener(released);
    this.listeners.add(entry);
    return () => void this.listeners.delete(entry);
  }

  async close(): Promise<void> {
    this.listeners.clear();
    await this.subscriber.close();
  }

  private wake(released: readonly string[] | null): void {
    for (const listener of [...this.listeners]) {
      try {
        listener(released);
      } catch (err) {
        this.log.error({ err }, 'a permit wake-up listener threw');
      }
    }
  }
}
