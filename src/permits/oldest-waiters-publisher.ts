import type { Logger } from '../obs/logger.js';
import { oldestPerScope, type PermitWaiter } from './oldest-waiters.js';
import type { OldestWaitersStore } from './oldest-waiters-store.js';

export interface OldestWaitersPublisherOptions {
  store: Pick<OldestWaitersStore, 'publish'>;
  /** This processor's field in the hash: unique among the processors sharing the namespace. */
  instance: string;
  /** Every run and call of this processor waiting for permits now. */
  waiters: () => Iterable<PermitWaiter>;
  /** The scopes published (the configured ones): others are left out, so an entry stays bounded by the config. */
  scopes: ReadonlySet<string>;
  everyMs: number;
  logger: Logger;
  now?: () => number;
}

/**
 * Publishes this processor's oldest waiter per permit scope every `everyMs`, so the console sees
 * them whichever process it runs in. A processor with nothing waiting writes nothing, once its
 * entry is gone; on stop the entry is removed rather than left to lapse.
 */
export class OldestWaitersPublisher {
  private timer: NodeJS.Timeout | undefined;
  private publishing: Promise<void> | undefined;
  /** Whether Redis may hold an entry of ours: from any publication but an empty one known to have gone through. */
  private entryLeft = false;
  private failing = false;
  private readonly now: () => number;
  private readonly log: Logger;

  constructor(private readonly opts: OldestWaitersPublisherOptions) {
    this.now = opts.now ?? Date.now;
    this.log = opts.logger.child({ component: 'oldest-waiters' });
  }

  start(): void {
    this.timer = setInterval(() => void this.tick(), this.opts.everyMs);
    this.timer.unref();
  }

  /** Stops publishing and removes this processor's entry (a failure leaves it to lapse). */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.publishing;
    if (this.entryLeft) await this.publish(new Map());
  }

  /** One publication, unless the one before is still in flight. */
  tick(): Promise<void> {
    this.publishing ??= this.publish(this.oldest()).finally(() => (this.publishing = undefined));
    return this.publishing;
  }

  private oldest(): Map<string, number> {
    const oldest = oldestPerScope(this.opts.waiters());
    for (const scope of oldest.keys()) if (!this.opts.scopes.has(scope)) oldest.delete(scope);
    return oldest;
  }

  private async publish(oldest: ReadonlyMap<string, number>): Promise<void> {
    if (oldest.size === 0 && !this.entryLeft) return;
    try {
      await this.opts.store.publish(this.opts.instance, oldest, this.now());
      this.entryLeft = oldest.size > 0;
      if (this.failing) this.log.info('publishing the oldest waiters again');
      this.failing = false;
    } catch (err) {
      this.entryLeft = true;
      // Once per outage, not every period: meanwhile the entry lapses, and readers stop counting these waiters.
      if (!this.failing) this.log.warn({ err }, 'could not publish the oldest waiters; trying again every period');
      this.failing = true;
    }
  }
}
