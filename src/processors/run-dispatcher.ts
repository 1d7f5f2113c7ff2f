import type { BreakerGate } from '../breakers/breaker-gate.js';
import type { AttemptContext } from './run-executor.js';
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

/** What the dispatcher needs from the shared breakers (see `RunBreakerGate`). */
export interface DispatchBreakers {
  /** The breaker decision for a run, given how many runs this instance is probing with per dependency. */
  gate(run: RunRequested, probing: ReadonlyMap<string, number>): BreakerGate;
  /** Dependencies a run needs that are not closed: starting it makes it one of their probing runs. */
  probedBy(run: RunRequested): string[];
  /** Calls back when any breaker changed; returns an unsubscribe function. */
  onChange(listener: () => void): () => void;
}

export interface DispatchTask {
  run: RunRequested;
  /** Which partition it came from, so revocation can drop it. */
  source: string;
  offset: number;
  context: AttemptContext;
  /** The dependency this run was last held for, so a hold is announced once, not every round. */
  heldFor?: string;
  /** Dependencies this run counts as a probe of in this instance while it runs. */
  probes?: string[];
}

/** Permit requests in flight at once per dispatch round. */
const ACQUIRE_BATCH = 16;

export interface RunDispatcherDeps {
  permits: RunPermitSource;
  execute: (run: RunRequested, task: DispatchTask) => Promise<unknown>;
  /** Called once per task when its outcome is recorded (or it was dropped as expired). */
  onFinished: (task: DispatchTask, outcome: 'done' | 'failed') => void;
  maxInFlight: number;
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
 */
export class RunDispatcher {
  private readonly queue = new FairQueue<DispatchTask>();
  private readonly blockedTenants = new Set<string>();
  private readonly blockedClasses = new Set<RunClass>();
  private readonly running = new Set<Promise<void>>();
  /** Held runs in arrival order, with the dependency they wait for. */
  private held: { waiting: Waiting<DispatchTask>; dependency: string }[] = [];
  /** Runs started while a dependency they need was not closed: this instance's probes of it. */
  private readonly probing = new Map<string, number>();
  private readonly now: () => number;
  private pumping = false;
  private pumpAgain = false;
  private stopped = false;
  private readonly unsubscribe: () => void;
  private readonly unsubscribeBreakers: () => void;
  private readonly poll: NodeJS.Timeout;

  constructor(private readonly deps: RunDispatcherDeps) {
    this.now = deps.now ?? Date.now;
    this.unsubscribe = deps.permits.onWake(() => this.wake());
    this.unsubscribeBreakers = deps.breakers?.onChange(() => this.wake()) ?? (() => undefined);
    this.poll = setInterval(() => this.wake(), deps.fallbackPollMs);
    this.poll.unref();
  }

  get waiting(): number {
    return this.queue.size + this.held.length;
  }

  /** Held runs that came from one partition. */
  heldFrom(source: string): number {
    let n = 0;
    for (const h of this.held) if (h.waiting.item.source === source) n++;
    return n;
  }

  /** Held runs per dependency they wait for. */
  heldByDependency(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const h of this.held) counts.set(h.dependency, (counts.get(h.dependency) ?? 0) + 1);
    return counts;
  }

  get inFlight(): number {
    return this.running.size;
  }

  waitingOf(runClass: RunClass): number {
    return this.queue.sizeOf(runClass) + this.held.filter((h) => h.waiting.runClass === runClass).length;
  }

  oldestWaiting(runClass: RunClass): number | undefined {
    let oldest = this.queue.oldest(runClass);
    for (const h of this.held) if (h.waiting.runClass === runClass && (oldest === undefined || h.waiting.enqueuedAt < oldest)) oldest = h.waiting.enqueuedAt;
    return oldest;
  }

  submit(task: DispatchTask): void {
    this.queue.push({ runClass: task.run.class, tenant: task.run.tenantId, item: task, enqueuedAt: this.now() });
    this.pump();
  }

  /** Drops waiting runs of partitions this instance no longer owns; their new owner redelivers them. */
  forget(source: (s: string) => boolean): number {
    const before = this.held.length;
    this.held = this.held.filter((h) => !source(h.waiting.item.source));
    return this.queue.removeWhere((t) => source(t.source)).length + before - this.held.length;
  }

  /** Stops starting new work and waits (bounded) for running work; returns how many were still running. */
  async stop(graceMs: number): Promise<number> {
    this.stopped = true;
    clearInterval(this.poll);
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

  private isBlocked = (runClass: RunClass, tenant: string) => this.blockedClasses.has(runClass) || this.blockedTenants.has(`${runClass}\u0000${tenant}`);

  /** Held runs go back to the head of their lines, oldest first, to be gated again. */
  private release(): void {
    const held = this.held;
    this.held = [];
    for (let i = held.length - 1; i >= 0; i--) this.queue.putBack(held[i]!.waiting);
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
        if (isExpired(next.item.run.deadline, this.now())) this.start(next, undefined);
        else if (!this.holdIfBlocked(next)) batch.push(next);
      }
      if (batch.length === 0) return;
      // One failed request (a Redis timeout) must not lose the batch: it counts as a refusal that
      // blocks nothing, and the next wake-up or poll asks again.
      const settled = await Promise.allSettled(batch.map((w) => this.deps.permits.tryAcquire(w.item.run)));
      const refused: boolean[] = settled.map((result, i) => {
        const w = batch[i]!;
        if (result.status === 'rejected') {
          this.deps.logger.warn({ err: result.reason, runId: w.item.run.runId }, 'could not ask for run permits; the run stays queued');
          return true;
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
        this.countProbes(w.item.probes ?? [], -1);
        w.item.probes = undefined;
        this.queue.putBack(w);
      }
      if (settled.some((r) => r.status === 'rejected')) return;
    }
  }

  /** Sets a run aside while a dependency it needs is open; `unavailable` runs go on to their fallback. */
  private holdIfBlocked(w: Waiting<DispatchTask>): boolean {
    const breakers = this.deps.breakers;
    if (!breakers) return false;
    const gate = breakers.gate(w.item.run, this.probing);
    if (gate.kind === 'go') {
      // Counted from now, not from the start: the rest of this round must see the probe taken.
      w.item.probes = breakers.probedBy(w.item.run);
      this.countProbes(w.item.probes, 1);
    }
    // `unavailable` runs go on to their fallback without calling, so they probe nothing.
    if (gate.kind !== 'wait') return false;
    const newHold = w.item.heldFor !== gate.dependency;
    w.item.heldFor = gate.dependency;
    this.held.push({ waiting: w, dependency: gate.dependency });
    if (newHold) this.deps.onHeld?.(w.item, gate.dependency, gate.until);
    return true;
  }

  private countProbes(dependencies: readonly string[], delta: 1 | -1): void {
    for (const d of dependencies) {
      const n = (this.probing.get(d) ?? 0) + delta;
      if (n > 0) this.probing.set(d, n);
      else this.probing.delete(d);
    }
  }

  private start(w: Waiting<DispatchTask>, permits: HeldPermits | undefined): void {
    const { metrics } = this.deps;
    const probed = w.item.probes ?? [];
    metrics.queueWait.observe({ class: w.runClass }, (this.now() - w.enqueuedAt) / 1000);
    const task = w.item;
    const done: Promise<void> = this.deps
      .execute(task.run, task)
      .then(
        () => this.deps.onFinished(task, 'done'),
        (err: unknown) => {
          this.deps.logger.error({ err, runId: task.run.runId }, 'run outcome not recorded; the record stays uncommitted and will be redelivered');
          this.deps.onFinished(task, 'failed');
        },
      )
      .finally(async () => {
        this.countProbes(probed, -1);
        // A finished probe frees room for a held run, which no permit release may announce.
        if (probed.length > 0) this.release();
        if (permits) await permits.release().catch((err: unknown) => this.deps.logger.warn({ err, runId: task.run.runId }, 'could not release run permits; their lease will expire'));
        this.running.delete(done);
        this.pump();
      });
    this.running.add(done);
  }
}
