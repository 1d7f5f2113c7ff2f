import { ownEntry } from '../config/lookup.js';
import type { SluiceConfig } from '../config/schema.js';
import { dependenciesOf } from '../config/workflows.js';
import type { RunRequested } from '../events/schemas.js';
import { minTimeToFinishMs, retryDeadline } from '../runs/deadline.js';
import type { BreakerBoard } from './breaker-board.js';
import { limitAtShare } from '../util/limit-share.js';
import { gateRun, type BreakerGate } from './breaker-gate.js';
import { rampUpShares } from './ramp-up-shares.js';

/**
 * The breaker decisions a processor's dispatcher makes for whole runs: which dependencies a run's
 * workflow needs (from config), what the board says of them, and how many runs needing each may
 * be under way in this instance: its probes while not closed, its ramped cap while it ramps up
 * after a close (each processor applies that cap to its own runs; the dependency permits in Redis
 * bound the calls across all of them).
 */
export class RunBreakerGate {
  private readonly needs = new Map<string, string[]>();
  private readonly rampShare: (dependency: string) => number;

  constructor(
    private readonly config: SluiceConfig,
    private readonly board: Pick<BreakerBoard, 'all' | 'view' | 'onChange'>,
    private readonly now: () => number = Date.now,
  ) {
    this.rampShare = rampUpShares(config, board, now);
  }

  /**
   * A run waits for a breaker's next probe only if what its steps need still fits after it, and an
   * interactive run only within its wait share (`admission.interactiveWaitShare`), as for a retry;
   * past that its fallback answers at once.
   */
  gate(run: RunRequested, probing: ReadonlyMap<string, number>): BreakerGate {
    const toFinishMs = minTimeToFinishMs(ownEntry(this.config.workflows, run.workflow)?.steps.length ?? 1);
    return gateRun({
      runClass: run.class,
      deadline: retryDeadline(run, this.config.admission.interactiveWaitShare, toFinishMs),
      needed: this.needed(run),
      views: this.board.all(),
      now: this.now(),
      minCallMs: toFinishMs,
      probeRoom: (d) => (probing.get(d) ?? 0) < this.room(d),
      rampingUp: (d) => this.rampingUp(d),
    });
  }

  /** Dependencies a run needs that count its start: those not closed, and those ramping up. */
  probedBy(run: RunRequested): string[] {
    return this.needed(run).filter((d) => this.board.view(d).state !== 'closed' || this.rampingUp(d));
  }

  private rampingUp(dependency: string): boolean {
    return this.board.view(dependency).state === 'closed' && this.rampShare(dependency) < 1;
  }

  private room(dependency: string): number {
    const entry = ownEntry(this.config.dependencies, dependency);
    if (!entry) return 1;
    return this.board.view(dependency).state === 'closed' ? limitAtShare(entry.maxConcurrency, this.rampShare(dependency)) : entry.breaker.halfOpenProbes;
  }

  onChange(listener: () => void): () => void {
    return this.board.onChange(() => listener());
  }

  /** A workflow no longer configured needs nothing: the run is dead-lettered without calling anyone. */
  private needed(run: RunRequested): string[] {
    let needed = this.needs.get(run.workflow);
    if (!needed) {
      const workflow = ownEntry(this.config.workflows, run.workflow);
      needed = workflow ? dependenciesOf(workflow.steps) : [];
      if (workflow) this.needs.set(run.workflow, needed);
    }
    return needed;
  }
}
