import { ownEntry } from '../config/lookup.js';
import type { SluiceConfig } from '../config/schema.js';
import { dependenciesOf } from '../config/workflows.js';
import type { RunRequested } from '../events/schemas.js';
import { MIN_USEFUL_CALL_MS } from '../runs/deadline.js';
import type { BreakerBoard } from './breaker-board.js';
import { gateRun, type BreakerGate } from './breaker-gate.js';

/**
 * The breaker decisions a processor's dispatcher makes for whole runs: which dependencies a run's
 * workflow needs (from config), what the board says of them, and how many probes each allows.
 */
export class RunBreakerGate {
  private readonly needs = new Map<string, string[]>();

  constructor(
    private readonly config: SluiceConfig,
    private readonly board: Pick<BreakerBoard, 'all' | 'view' | 'onChange'>,
    private readonly now: () => number = Date.now,
  ) {}

  gate(run: RunRequested, probing: ReadonlyMap<string, number>): BreakerGate {
    return gateRun({
      runClass: run.class,
      deadline: run.deadline,
      needed: this.needed(run),
      views: this.board.all(),
      now: this.now(),
      minCallMs: MIN_USEFUL_CALL_MS,
      probeRoom: (d) => (probing.get(d) ?? 0) < (ownEntry(this.config.dependencies, d)?.breaker.halfOpenProbes ?? 1),
    });
  }

  probedBy(run: RunRequested): string[] {
    return this.needed(run).filter((d) => this.board.view(d).state !== 'closed');
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
