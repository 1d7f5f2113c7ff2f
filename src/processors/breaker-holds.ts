import type { BreakerGate } from '../breakers/breaker-gate.js';
import type { RunClass, RunRequested } from '../events/schemas.js';
import type { Waiting } from './fair-queue.js';

/** What the dispatcher needs from the shared breakers (see `RunBreakerGate`). */
export interface DispatchBreakers {
  /** The breaker decision for a run, given how many runs this instance is probing with per dependency. */
  gate(run: RunRequested, probing: ReadonlyMap<string, number>): BreakerGate;
  /** Dependencies a run needs that are not closed: starting it makes it one of their probing runs. */
  probedBy(run: RunRequested): string[];
  /** Calls back when any breaker changed; returns an unsubscribe function. */
  onChange(listener: () => void): () => void;
}

/** The part of a dispatch task that holding and probing read and write. */
export interface HoldableTask {
  run: RunRequested;
  /** Which partition it came from, so revocation can drop it. */
  source: string;
  /** The dependency this run was last held for, so a hold is announced once, not every round. */
  heldFor?: string;
  /** Dependencies this run counts as a probe of in this instance while it runs. */
  probes?: string[];
}

/** Runs held for one dependency of one tenant and class. */
export interface HeldCount {
  dependency: string;
  tenant: string;
  runClass: RunClass;
  runs: number;
}

/**
 * Where a run waits for an open breaker. A run that needs a dependency whose breaker is open is
 * set aside here, so it neither blocks other runs nor reaches the dependency, until the dispatcher
 * takes every held run back to gate it again (a breaker changed, a probe finished, or the poll).
 * While a breaker is being probed, only as many runs start as it has probes, and while a closed
 * one ramps up after its close, only as many as its ramped cap: this instance's probing runs are
 * counted per dependency from the moment they pass the gate until they end.
 */
export class BreakerHolds<T extends HoldableTask> {
  /** Held runs in arrival order, with the dependency they wait for. */
  private held: { waiting: Waiting<T>; dependency: string }[] = [];
  private readonly probing = new Map<string, number>();

  constructor(
    private readonly breakers: DispatchBreakers,
    /** Called when a run starts waiting for an open dependency (once per hold). */
    private readonly onHeld?: (task: T, dependency: string, until: number) => void,
  ) {}

  get size(): number {
    return this.held.length;
  }

  sizeOf(runClass: RunClass): number {
    let n = 0;
    for (const h of this.held) if (h.waiting.runClass === runClass) n++;
    return n;
  }

  /** When the longest-held run of a class was first queued, or undefined when none is held. */
  oldest(runClass: RunClass): number | undefined {
    let oldest: number | undefined;
    for (const h of this.held) if (h.waiting.runClass === runClass && (oldest === undefined || h.waiting.enqueuedAt < oldest)) oldest = h.waiting.enqueuedAt;
    return oldest;
  }

  /** Held runs that came from one partition. */
  from(source: string): number {
    let n = 0;
    for (const h of this.held) if (h.waiting.item.source === source) n++;
    return n;
  }

  /** Held runs per dependency they wait for, tenant and class, keyed by the three. */
  counts(): Map<string, HeldCount> {
    const counts = new Map<string, HeldCount>();
    for (const { waiting, dependency } of this.held) {
      const key = `${dependency}\u0000${waiting.tenant}\u0000${waiting.runClass}`;
      const count = counts.get(key);
      if (count) count.runs++;
      else counts.set(key, { dependency, tenant: waiting.tenant, runClass: waiting.runClass, runs: 1 });
    }
    return counts;
  }

  /**
   * Gates a run: true when it is now held. A run that may go and needs a dependency that is not
   * closed becomes one of its probes at once, so the rest of the round sees the probe taken;
   * `unavailable` runs go on to their fallback without calling, so they probe nothing.
   */
  hold(w: Waiting<T>): boolean {
    const gate = this.breakers.gate(w.item.run, this.probing);
    if (gate.kind === 'go') {
      w.item.probes = this.breakers.probedBy(w.item.run);
      this.countProbes(w.item.probes, 1);
    }
    if (gate.kind !== 'wait') return false;
    const newHold = w.item.heldFor !== gate.dependency;
    w.item.heldFor = gate.dependency;
    this.held.push({ waiting: w, dependency: gate.dependency });
    if (newHold) this.onHeld?.(w.item, gate.dependency, gate.until);
    return true;
  }

  /** A run that passed the gate did not start after all (refused a permit, or failed): its probes are given back. */
  unprobe(task: T): void {
    this.countProbes(task.probes ?? [], -1);
    task.probes = undefined;
  }

  /** Every held run, oldest first, no longer held. */
  takeAll(): Waiting<T>[] {
    const held = this.held;
    this.held = [];
    return held.map((h) => h.waiting);
  }

  /** Held runs that `done` says are over (their deadline passed), no longer held. */
  takeWhere(done: (task: T) => boolean): Waiting<T>[] {
    const taken = this.held.filter((h) => done(h.waiting.item));
    if (taken.length > 0) this.held = this.held.filter((h) => !done(h.waiting.item));
    return taken.map((h) => h.waiting);
  }

  /** Drops held runs of partitions this instance no longer owns; returns how many. */
  forget(source: (s: string) => boolean): number {
    const before = this.held.length;
    this.held = this.held.filter((h) => !source(h.waiting.item.source));
    return before - this.held.length;
  }

  private countProbes(dependencies: readonly string[], delta: 1 | -1): void {
    for (const d of dependencies) {
      const n = (this.probing.get(d) ?? 0) + delta;
      if (n > 0) this.probing.set(d, n);
      else this.probing.delete(d);
    }
  }
}
