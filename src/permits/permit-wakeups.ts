import type { Redis } from 'ioredis';
import type { Logger } from '../obs/logger.js';

/**
 * Called with the scope names a release gave back, or with null when anything may have changed
 * (the subscriber reconnected, and what was announced meanwhile is lost).
 */
export type WakeListener = (released: readonly string[] | null) => void;

export interface PermitWakeupsOptions {
  /** The channel permits-release.lua publishes on (`redisKeys(ns).permitReleased()`). */
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
  private readonly subscriber: Redis;
  private readonly listeners = new Set<WakeListener>();
  private readonly log: Logger;

  constructor(redis: Redis, private readonly opts: PermitWakeupsOptions) {
    this.fallbackPollMs = Math.min(MAX_POLL_MS, Math.max(MIN_POLL_MS, Math.round(opts.fallbackPollMs ?? DEFAULT_POLL_MS)));
    this.log = opts.logger.child({ component: 'permit-wakeups' });
    // A connection in subscriber mode can run no other command: it must be its own.
    this.subscriber = redis.duplicate();
    this.subscriber.on('message', (channel: string, payload: string) => {
      if (channel === opts.channel) this.wake(payload.split(' '));
    });
    // ioredis subscribes again after a reconnect; announcements made while it was away are lost.
    this.subscriber.on('ready', () => this.wake(null));
    this.subscriber.on('error', (err: Error) => this.log.warn({ err }, 'permit wake-up subscriber error; waiters fall back to polling'));
  }

  /** Resolves once subscribed; rejects if Redis cannot be reached. */
  async start(): Promise<void> {
    await this.subscriber.subscribe(this.opts.channel);
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
    await this.subscriber.quit().catch(() => this.subscriber.disconnect());
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
