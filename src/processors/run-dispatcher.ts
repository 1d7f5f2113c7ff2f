import type { AttemptContext } from '../execution/attempt.js';
import type { RunClass, RunRequested } from '../events/schemas.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import type { PermitWaiter } from '../permits/oldest-waiters.js';
import { runScopeNames } from '../permits/permit-scopes.js';
import type { HeldPermits, RunPermitSource } from '../permits/run-permit-source.js';
import { isExpired } from '../runs/deadline.js';
import { BreakerHolds, type DispatchBreakers, type HeldCount, type HoldableTask } from './breaker-holds.js';
import { FairQueue, type Waiting } from './fair-queue.js';
import { reservedTurnsDueAt } from '../pacing/prepaid-turns.js';
import { InfraBackoff } from './infra-backoff.js';
import { measuresAdmissionWait, secondsSinceAdmission } from '../execution/run-signals.js';
import type { RetryPolicy } from '../retries/retry-policy.js';
import { InfrastructureError, afterInfrastructureFailure, asInfrastructureError, infrastructureFailure, keepTryingDelayMs, type RunFailure } from '../execution/run-faults.js';

export interface DispatchTask extends HoldableTask {
  offset: number;
  context: AttemptContext;
  /** Attempts of this record that failed on the infrastructure in this instance (see `infraRetry`). */
  infraFailures?: number;
}

/** Permit requests in flight at once per dispatch round. */
const ACQUIRE_BATCH = 16;
/**
 * How often waiting runs are checked for a passed deadline. A run waiting behind a cap is not
 * looked at until the cap frees, so without the sweep it would expire only then, long after its
 * caller stopped waiting; with it, at most this much after its deadline.
 */
const EXPIRY_SWEEP_MS = 100;
/** A run whose reserved turns are due sooner than this is queued at once: its permits take about as long. */
const NOT_DUE_SLACK_MS = 20;

export interface RunDispatcherDeps {
  permits: RunPermitSource;
  execute: (run: RunRequested, task: DispatchTask) => Promise<unknown>;
  /** Called once per task when its outcome is recorded, so its record may be committed. */
  onFinished: (task: DispatchTask) => void;
  /**
   * Ends a run without (further) attempts: produces it to the DLQ and reports it failed; resolves
   * once both are acknowledged. Tried until it succeeds, since only then may the record be committed.
   */
  deadLetter: (task: DispatchTask, failure: RunFailure) => Promise<unknown>;
  /** Why a run cannot be served by this configuration (unknown tenant or workflow), if so. */
  unconfigured?: (run: RunRequested) => RunFailure | undefined;
  /** Attempts that fail on the infrastructure (Redis, Kafka) are repeated here with this backoff, then dead-lettered. */
  infraRetry: RetryPolicy;
  maxInFlight: number;
  /** A tenant's interactive line whose oldest run waited longer than this serves its newest first (adaptive LIFO; absent: always in order). */
  interactiveLifoAfterMs?: number;
  breakers?: DispatchBreakers;
  /** Called when a run starts waiting for an open dependency (once per hold). */
  onHeld?: (task: DispatchTask, dependency: string, until: number) => void;
  /** Called after every dispatch round, so the consumer can pause partitions whose work is all held. */
  onRound?: () => void;
  /** Bounded fallback: blocked work is retried at least this often even if a wake-up is lost. */
  fallbackPollMs: number;
  logger: Logger;
  metrics: Metrics;
  now?: () => number;
  /** Source for backoff jitter; injectable so tests are deterministic. */
  random?: () => number;
}

/**
 * Where a permit is taken. Waiting runs sit in a fair queue; the dispatcher offers the head of
 * each tenant in turn to the permit source, and a refusal blocks only what was full (that tenant,
 * or the whole class when the global or batch share is) until a release wakes it — so a tenant at
 * its cap never holds up another. Expired runs are handed to the executor without permits, which
 * records them as expired without using capacity. Runs that need a dependency whose breaker is
 * open are set aside (held) until a breaker changes or the periodic poll looks again, so they
 * neither block other runs nor reach the dependency; while a breaker is being probed, only as many
 * runs as it has probes start.
 *
 * Every task ends: a run naming an unknown tenant or workflow is dead-lettered at once; an attempt
 * that fails on the infrastructure (not in a step: those the executor handles) is repeated here
 * after a backoff, its record still uncommitted, and dead-lettered once `infraRetry` is used up.
 */
export class RunDispatcher {
  private readonly queue: FairQueue<DispatchTask>;
  private readonly blockedTenants = new Set<string>();
  private readonly blockedClasses = new Set<RunClass>();
  private readonly running = new Set<Promise<void>>();
  private readonly holds: BreakerHolds<DispatchTask> | undefined;
  private readonly backingOff = new InfraBackoff<DispatchTask>();
  /** Runs whose provider turns, reserved at admission, are not due yet: they wait holding no permit. */
  private readonly notDue = new InfraBackoff<DispatchTask>();
  /** Runs being dead-lettered; a revoked partition's are given up (their new owner redelivers them). */
  private readonly ending = new Set<DispatchTask>();
  private readonly now: () => number;
  private readonly random: () => number;
  /** The batch whose permits are being asked for: out of the queue meanwhile, but still waiting. */
  private asking: readonly Waiting<DispatchTask>[] = [];
  private pumping = false;
  private pumpAgain = false;
  private stopped = false;
  private readonly unsubscribe: () => void;
  private readonly unsubscribeBreakers: () => void;
  private readonly poll: NodeJS.Timeout;
  private readonly expirySweep: NodeJS.Timeout;

  constructor(private readonly deps: RunDispatcherDeps) {
    this.now = deps.now ?? Date.now;
    this.random = deps.random ?? Math.random;
    this.queue = new FairQueue({ interactiveAfterMs: deps.interactiveLifoAfterMs, now: this.now });
    this.holds = deps.breakers && new BreakerHolds(deps.breakers, deps.onHeld);
    this.unsubscribe = deps.permits.onWake(() => this.wake());
    this.unsubscribeBreakers = deps.breakers?.onChange(() => this.wake()) ?? (() => undefined);
    this.poll = setInterval(() => this.wake(), deps.fallbackPollMs);
    this.poll.unref();
    this.expirySweep = setInterval(() => this.expireWaiting(), EXPIRY_SWEEP_MS);
    this.expirySweep.unref();
  }

  get waiting(): number {
    return this.queue.size + (this.holds?.size ?? 0) + this.backingOff.size + this.notDue.size;
  }

  /** Held runs that came from one partition. */
  heldFrom(source: string): number {
    return this.holds?.from(source) ?? 0;
  }

  /** Held runs per dependency they wait for, tenant and class, keyed by the three. */
  heldCounts(): Map<string, HeldCount> {
    return this.holds?.counts() ?? new Map();
  }

  get inFlight(): number {
    return this.running.size;
  }

  waitingOf(runClass: RunClass): number {
    return this.queue.sizeOf(runClass) + (this.holds?.sizeOf(runClass) ?? 0) + this.backingOff.sizeOf(runClass) + this.notDue.sizeOf(runClass);
  }

  oldestWaiting(runClass: RunClass): number | undefined {
    const times = [this.queue.oldest(runClass), this.holds?.oldest(runClass)].filter((t) => t !== undefined);
    return times.length === 0 ? undefined : Math.min(...times);
  }

  /**
   * The runs in line for their run permits, each with the scopes it needs, since it was queued.
   * Held runs wait for a breaker and backing-off ones for their backoff, not for permits.
   */
  *permitWaiters(): IterableIterator<PermitWaiter> {
    for (const w of [...this.queue, ...this.asking]) yield { scopes: runScopeNames({ tenantId: w.tenant, workflow: w.item.run.workflow, runClass: w.runClass }), since: w.enqueuedAt };
  }

  submit(task: DispatchTask): void {
    const dueInMs = (reservedTurnsDueAt(task.run) ?? 0) - this.now();
    if (dueInMs > NOT_DUE_SLACK_MS) {
      this.notDue.wait(task, dueInMs, (t) => this.enqueue(t));
      return;
    }
    this.enqueue(task);
  }

  private enqueue(task: DispatchTask): void {
    this.queue.push({ runClass: task.run.class, tenant: task.run.tenantId, item: task, enqueuedAt: this.now() });
    this.pump();
  }

  /** Drops waiting runs of partitions this instance no longer owns; their new owner redelivers them. */
  forget(source: (s: string) => boolean): number {
    const dropped = this.queue.removeWhere((t) => source(t.source)).length + (this.holds?.forget(source) ?? 0) + this.backingOff.forget(source) + this.notDue.forget(source);
    for (const task of this.ending) if (source(task.source)) this.ending.delete(task);
    return dropped;
  }

  /** Stops starting new work and waits (bounded) for running work; returns how many were still running. */
  async stop(graceMs: number): Promise<number> {
    this.stopped = true;
    clearInterval(this.poll);
    clearInterval(this.expirySweep);
    this.backingOff.clear();
    this.notDue.clear();
    this.unsubscribe();
    this.unsubscribeBreakers();
    const drained = Promise.all([...this.running]).then(() => true);
    const inTime = await Promise.race([drained, new Promise<boolean>((r) => setTimeout(() => r(false), graceMs).unref())]);
    return inTime ? 0 : this.running.size;
  }

  private wake(): void {
    this.release();
    if (this.queue.size === 0) return;
    this.blockedTenants.clear();
    this.blockedClasses.clear();
    this.pump();
  }

  /** Waiting runs whose deadline passed are ended now (without permits), wherever they wait: in line, or held for a breaker. */
  private expireWaiting(): void {
    if (this.stopped) return;
    const now = this.now();
    const expired = (task: DispatchTask) => isExpired(task.run.deadline, now);
    const due = [...(this.queue.size === 0 ? [] : this.queue.removeWhere(expired)), ...(this.holds?.takeWhere(expired) ?? [])];
    for (const w of due) this.start(w, undefined);
  }

  private isBlocked = (runClass: RunClass, tenant: string) => this.blockedClasses.has(runClass) || this.blockedTenants.has(`${runClass}\u0000${tenant}`);

  /** Held runs go back to the head of their lines, oldest first, to be gated again. */
  private release(): void {
    const held = this.holds?.takeAll() ?? [];
    for (let i = held.length - 1; i >= 0; i--) this.queue.putBack(held[i]!);
  }

  /** One pump at a time; a call while pumping makes it go round once more. */
  private pump(): void {
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    this.pumping = true;
    void this.dispatch()
      .then(() => this.deps.onRound?.())
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
        const unconfigured = this.deps.unconfigured?.(next.item.run);
        if (unconfigured) this.end(next.item, unconfigured);
        else if (isExpired(next.item.run.deadline, this.now())) this.start(next, undefined);
        else if (!this.holds?.hold(next)) batch.push(next);
      }
      if (batch.length === 0) return;
      // One failed request (a Redis timeout) must not lose the batch: that run backs off and is
      // asked again, as any attempt that failed on the infrastructure.
      this.asking = batch;
      const settled = await Promise.allSettled(batch.map((w) => this.deps.permits.tryAcquire(w.item.run)));
      this.asking = [];
      const refused: boolean[] = settled.map((result, i) => {
        const w = batch[i]!;
        if (result.status === 'rejected') {
          this.holds?.unprobe(w.item);
          this.afterInfrastructureFailure(w.item, new InfrastructureError('run_permits', undefined, result.reason));
          return false;
        }
        const answer = result.value;
        if (answer.granted) {
          this.start(w, answer.permits);
          return false;
        }
        if (answer.blockedBy === 'tenant' || answer.blockedBy === 'workflow') this.blockedTenants.add(`${w.runClass}\u0000${w.tenant}`);
        else this.blockedClasses.add(w.runClass);
        return true;
      });
      // Back in reverse, so refused runs keep their order at the head of their lines.
      for (let i = batch.length - 1; i >= 0; i--) {
        const w = batch[i]!;
        if (!refused[i]) continue;
        this.holds?.unprobe(w.item);
        this.queue.putBack(w);
      }
    }
  }

  private start(w: Waiting<DispatchTask>, permits: HeldPermits | undefined): void {
    const { metrics } = this.deps;
    const probing = (w.item.probes ?? []).length > 0;
    const now = this.now();
    const task = w.item;
    metrics.queueWait.observe({ class: w.runClass }, (now - w.enqueuedAt) / 1000);
    if (measuresAdmissionWait(task.run, task.infraFailures ?? 0)) metrics.runWaitSinceAdmission.observe({ class: w.runClass }, secondsSinceAdmission(task.run.admittedAt, now));
    const done: Promise<void> = this.deps
      .execute(task.run, task)
      .then(
        () => this.deps.onFinished(task),
        (err: unknown) => this.afterInfrastructureFailure(task, asInfrastructureError(err)),
      )
      .finally(async () => {
        this.holds?.unprobe(task);
        // A finished probe frees room for a held run, which no permit release may announce.
        if (probing) this.release();
        if (permits) await permits.release().catch((err: unknown) => this.deps.logger.warn({ err, runId: task.run.runId }, 'could not release run permits; their lease will expire'));
        this.running.delete(done);
        this.pump();
      });
    this.running.add(done);
  }

  /**
   * An attempt failed outside its steps (Redis or Kafka unreachable, or a fault in the processor):
   * the run is not failed by that. It waits out a backoff and is queued again, its record still
   * uncommitted, or, once `infraRetry.maxAttempts` attempts failed, it is dead-lettered.
   */
  private afterInfrastructureFailure(task: DispatchTask, error: InfrastructureError): void {
    if (this.stopped) return;
    const failures = (task.infraFailures ?? 0) + 1;
    task.infraFailures = failures;
    const now = this.now();
    const decision = afterInfrastructureFailure({ failures, policy: this.deps.infraRetry, now, deadline: task.run.deadline, random: this.random });
    this.deps.metrics.processorInfraFailures.inc({ operation: error.operation, decision: decision.kind });
    const log = { err: error, runId: task.run.runId, failures };
    if (decision.kind === 'dead_letter') {
      this.deps.logger.error(log, 'attempts keep failing on the infrastructure; dead-lettering the run');
      this.end(task, infrastructureFailure(error, failures));
      return;
    }
    this.deps.logger.warn({ ...log, retryInMs: decision.at - now }, 'attempt failed on the infrastructure; the run is tried again here after a backoff');
    this.backingOff.wait(task, decision.at - now, (t) => this.submit(t));
  }

  /**
   * Dead-letters a run and reports it failed, trying again with capped backoff for as long as that
   * fails (Kafka down): its record stays uncommitted meanwhile, so it is never lost, and the run
   * ends as soon as Kafka is back. Counted as running, so `maxInFlight` bounds these too.
   */
  private end(task: DispatchTask, failure: RunFailure): void {
    this.ending.add(task);
    const done: Promise<void> = (async () => {
      for (let tries = 0; !this.stopped && this.ending.has(task); tries++) {
        try {
          await this.deps.deadLetter(task, failure);
          this.deps.onFinished(task);
          return;
        } catch (err) {
          const waitMs = keepTryingDelayMs(tries, this.deps.infraRetry, this.random);
          this.deps.logger.error({ err, runId: task.run.runId, reason: failure.reason, waitMs }, 'could not dead-letter the run; its record stays uncommitted and this is tried again');
          await new Promise((r) => setTimeout(r, waitMs).unref());
        }
      }
    })().finally(() => {
      this.ending.delete(task);
      this.running.delete(done);
      this.pump();
    });
    this.running.add(done);
  }
}
