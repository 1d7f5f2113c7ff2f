import type { RunClass, RunRequested } from '../events/schemas.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import { isExpired } from '../runs/deadline.js';
import { FairQueue, type Waiting } from './fair-queue.js';

/** A granted set of run permits (global, class share, tenant, workflow), released exactly once. */
export interface HeldPermits {
  /** Stops renewing and gives the permits back, waking waiting processors everywhere. */
  release(): Promise<void>;
}

export type RunPermitAnswer = { granted: true; permits: HeldPermits } | { granted: false; blockedBy: 'global' | 'class' | 'tenant' | 'workflow' };

/** Where a run's permits come from: Redis in production, anything honest in tests. */
export interface RunPermitSource {
  tryAcquire(run: RunRequested): Promise<RunPermitAnswer>;
  /** Calls back when permits may have been released anywhere; returns an unsubscribe function. */
  onWake(listener: () => void): () => void;
}

export interface DispatchTask {
  run: RunRequested;
  /** Which partition it came from, so revocation can drop it. */
  source: string;
  offset: number;
}

/** Permit requests in flight at once per dispatch round. */
const ACQUIRE_BATCH = 16;

export interface RunDispatcherDeps {
  permits: RunPermitSource;
  execute: (run: RunRequested) => Promise<unknown>;
  /** Called once per task when its outcome is recorded (or it was dropped as expired). */
  onFinished: (task: DispatchTask, outcome: 'done' | 'failed') => void;
  maxInFlight: number;
  /** Bounded fallback: blocked work is retried at least this often even if a wake-up is lost. */
  fallbackPollMs: number;
  logger: Logger;
  metrics: Metrics;
  now?: () => number;
}

/**
 * Where a permit is taken. Waiting runs sit in a fair queue; the dispatcher offers the head of
 * each tenant in turn to the permit source, and a refusal blocks only what was full (that tenant,
 * or the whole class when the global or batch share is) until a release wakes it — so a tenant at
 * its cap never holds up another. Expired runs are handed to the executor without permits, which
 * records them as expired without using capacity.
 */
export class RunDispatcher {
  private readonly queue = new FairQueue<DispatchTask>();
  private readonly blockedTenants = new Set<string>();
  private readonly blockedClasses = new Set<RunClass>();
  private readonly running = new Set<Promise<void>>();
  private readonly now: () => number;
  private pumping = false;
  private pumpAgain = false;
  private stopped = false;
  private readonly unsubscribe: () => void;
  private readonly poll: NodeJS.Timeout;

  constructor(private readonly deps: RunDispatcherDeps) {
    this.now = deps.now ?? Date.now;
    this.unsubscribe = deps.permits.onWake(() => this.wake());
    this.poll = setInterval(() => this.wake(), deps.fallbackPollMs);
    this.poll.unref();
  }

  get waiting(): number {
    return this.queue.size;
  }

  get inFlight(): number {
    return this.running.size;
  }

  waitingOf(runClass: RunClass): number {
    return this.queue.sizeOf(runClass);
  }

  oldestWaiting(runClass: RunClass): number | undefined {
    return this.queue.oldest(runClass);
  }

  submit(task: DispatchTask): void {
    this.queue.push({ runClass: task.run.class, tenant: task.run.tenantId, item: task, enqueuedAt: this.now() });
    this.pump();
  }

  /** Drops waiting runs of partitions this instance no longer owns; their new owner redelivers them. */
  forget(source: (s: string) => boolean): number {
    return this.queue.removeWhere((t) => source(t.source)).length;
  }

  /** Stops starting new work and waits (bounded) for running work; returns how many were still running. */
  async stop(graceMs: number): Promise<number> {
    this.stopped = true;
    clearInterval(this.poll);
    this.unsubscribe();
    const drained = Promise.all([...this.running]).then(() => true);
    const inTime = await Promise.race([drained, new Promise<boolean>((r) => setTimeout(() => r(false), graceMs).unref())]);
    return inTime ? 0 : this.running.size;
  }

  private wake(): void {
    if (this.queue.size === 0) return;
    this.blockedTenants.clear();
    this.blockedClasses.clear();
    this.pump();
  }

  private isBlocked = (runClass: RunClass, tenant: string) => this.blockedClasses.has(runClass) || this.blockedTenants.has(`${runClass}\u0000${tenant}`);

  /** One pump at a time; a call while pumping makes it go round once more. */
  private pump(): void {
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    this.pumping = true;
    void this.dispatch()
      .catch((err: unknown) => this.deps.logger.error({ err }, 'dispatch failed; waiting runs stay queued for the next wake-up'))
      .finally(() => {
        this.pumping = false;
        if (this.pumpAgain) {
          this.pumpAgain = false;
          this.pump();
        }
      });
  }

  /**
   * Takes up to ACQUIRE_BATCH candidates off the queue and asks for their permits at once, so one
   * Redis round trip's latency is not paid per run; refused runs go back to the head of their line.
   */
  private async dispatch(): Promise<void> {
    while (!this.stopped) {
      const room = Math.min(ACQUIRE_BATCH, this.deps.maxInFlight - this.running.size);
      const batch: Waiting<DispatchTask>[] = [];
      for (let next = this.queue.peek(this.isBlocked); next && batch.length < room; next = this.queue.peek(this.isBlocked)) {
        this.queue.take(next);
        if (isExpired(next.item.run.deadline, this.now())) this.start(next, undefined);
        else batch.push(next);
      }
      if (batch.length === 0) return;
      const answers = await Promise.all(batch.map((w) => this.deps.permits.tryAcquire(w.item.run)));
      batch.forEach((w, i) => {
        const answer = answers[i]!;
        if (answer.granted) this.start(w, answer.permits);
        else if (answer.blockedBy === 'tenant' || answer.blockedBy === 'workflow') this.blockedTenants.add(`${w.runClass}\u0000${w.tenant}`);
        else this.blockedClasses.add(w.runClass);
      });
      // Back in reverse, so refused runs keep their order at the head of their lines.
      for (let i = batch.length - 1; i >= 0; i--) if (!answers[i]!.granted) this.queue.putBack(batch[i]!);
    }
  }

  private start(w: Waiting<DispatchTask>, permits: HeldPermits | undefined): void {
    const { metrics } = this.deps;
    metrics.queueWait.observe({ class: w.runClass }, (this.now() - w.enqueuedAt) / 1000);
    const task = w.item;
    const done: Promise<void> = this.deps
      .execute(task.run)
      .then(
        () => this.deps.onFinished(task, 'done'),
        (err: unknown) => {
          this.deps.logger.error({ err, runId: task.run.runId }, 'run outcome not recorded; the record stays uncommitted and will be redelivered');
          this.deps.onFinished(task, 'failed');
        },
      )
      .finally(async () => {
        if (permits) await permits.release().catch((err: unknown) => this.deps.logger.warn({ err, runId: task.run.runId }, 'could not release run permits; their lease will expire'));
        this.running.delete(done);
        this.pump();
      });
    this.running.add(done);
  }
}
