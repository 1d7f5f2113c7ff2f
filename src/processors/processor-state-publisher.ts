import type { Logger } from '../obs/logger.js';
import { oldestPerScope, type PermitWaiter } from '../permits/oldest-waiters.js';
import type { HeldCount } from './breaker-holds.js';
import { isIdle, type PausedPartition, type ProcessorState } from './processor-state.js';
import type { ProcessorStateStore } from './processor-state-store.js';

export interface ProcessorStatePublisherOptions {
  store: Pick<ProcessorStateStore, 'publish'>;
  /** This processor's field in the hash: unique among the processors sharing the namespace. */
  instance: string;
  /** Every run and call of this processor waiting for permits now. */
  waiters: () => Iterable<PermitWaiter>;
  /** The scopes published (the configured ones): others are left out, so an entry stays bounded by the config. */
  scopes: ReadonlySet<string>;
  /** The partitions this processor holds paused now (of those it owns). */
  paused: () => Iterable<PausedPartition>;
  /** The runs this processor holds for open dependencies now. */
  held: () => Iterable<HeldCount>;
  everyMs: number;
  logger: Logger;
  now?: () => number;
}

/**
 * Publishes this processor's state (oldest waiter per permit scope, paused partitions, held runs)
 * every `everyMs`, so the console sees it whichever process it runs in. A processor with nothing
 * to show writes nothing, once its entry is gone; on stop the entry is removed rather than left
 * to lapse.
 */
export class ProcessorStatePublisher {
  private timer: NodeJS.Timeout | undefined;
  private publishing: Promise<void> | undefined;
  /** Whether Redis may hold an entry of ours: from any publication but an empty one known to have gone through. */
  private entryLeft = false;
  private failing = false;
  private readonly now: () => number;
  private readonly log: Logger;

  constructor(private readonly opts: ProcessorStatePublisherOptions) {
    this.now = opts.now ?? Date.now;
    this.log = opts.logger.child({ component: 'processor-state' });
  }

  start(): void {
    this.timer = setInterval(() => void this.tick(), this.opts.everyMs);
    this.timer.unref();
  }

  /** Stops publishing and removes this processor's entry (a failure leaves it to lapse). */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.publishing;
    if (this.entryLeft) await this.publish({ oldest: new Map(), paused: [], held: [] });
  }

  /** One publication, unless the one before is still in flight. */
  tick(): Promise<void> {
    this.publishing ??= this.publish(this.state()).finally(() => (this.publishing = undefined));
    return this.publishing;
  }

  private state(): ProcessorState {
    const oldest = oldestPerScope(this.opts.waiters());
    for (const scope of oldest.keys()) if (!this.opts.scopes.has(scope)) oldest.delete(scope);
    return { oldest, paused: [...this.opts.paused()], held: [...this.opts.held()] };
  }

  private async publish(state: ProcessorState): Promise<void> {
    const idle = isIdle(state);
    if (idle && !this.entryLeft) return;
    try {
      await this.opts.store.publish(this.opts.instance, state, this.now());
      this.entryLeft = !idle;
      if (this.failing) this.log.info('publishing the processor state again');
      this.failing = false;
    } catch (err) {
      this.entryLeft = true;
      // Once per outage, not every period: meanwhile the entry lapses, and readers stop counting this processor.
      if (!this.failing) this.log.warn({ err }, 'could not publish the processor state; trying again every period');
      this.failing = true;
    }
  }
}
