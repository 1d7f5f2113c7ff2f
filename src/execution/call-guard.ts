import { gateRun, type BreakerView } from '../breakers/breaker-gate.js';
import type { BreakerAdmission, BreakerOutcome, BreakerStateName } from '../breakers/breaker-store.js';
import { ownEntry } from '../config/lookup.js';
import type { SluiceConfig } from '../config/schema.js';
import type { RunRequested } from '../events/schemas.js';
import type { Logger } from '../obs/logger.js';
import { MIN_USEFUL_CALL_MS } from '../runs/deadline.js';
import { infrastructureCall } from './run-faults.js';

/** The shared breakers: asked before every call, told every call's outcome. */
export interface SharedBreakers {
  admit(dependency: string, token: string): Promise<BreakerAdmission>;
  record(dependency: string, token: string | undefined, outcome: BreakerOutcome, durationMs: number): Promise<{ state: BreakerStateName; changed: boolean }>;
}

/** A permit per call at the dependency's scope; resolves to its release, or throws at the deadline. */
export interface DependencyPermits {
  acquire(dependency: string, run: RunRequested): Promise<() => Promise<void>>;
}

export interface CallGuardDeps {
  config: Pick<SluiceConfig, 'dependencies'>;
  breakers: SharedBreakers;
  /** This instance's view of the breakers, so an open one is not even asked. */
  board: { view(dependency: string): BreakerView };
  dependencyPermits: DependencyPermits;
  logger: Logger;
  now: () => number;
}

/** A call that was not made because the dependency's breaker is open (or its probes are taken). */
export class DependencyUnavailable extends Error {
  constructor(
    readonly dependency: string,
    /** When the dependency may next be called. */
    readonly until: number,
    /** Whether the run can wait for that within its deadline; if not, its tenant's fallback applies. */
    readonly canWait: boolean,
  ) {
    super(`${dependency} is unavailable (breaker open) until ${new Date(until).toISOString()}`);
    this.name = 'DependencyUnavailable';
  }
}

/**
 * What stands around every call to a dependency: the breaker admits it (or refuses with
 * `DependencyUnavailable`), a permit at the dependency's scope is held for the call itself, and
 * the breaker is told how the call went.
 */
export class CallGuard {
  constructor(private readonly deps: CallGuardDeps) {}

  /**
   * Asks the dependency's breaker whether this call may go out; resolves to the probe token when
   * it goes out as a half-open probe. An open breaker this instance already knows of is not asked.
   */
  async admit(run: RunRequested, dependency: string, token: string): Promise<string | undefined> {
    const { deps } = this;
    const gate = gateRun({ runClass: run.class, deadline: run.deadline, needed: [dependency], views: new Map([[dependency, deps.board.view(dependency)]]), now: deps.now(), minCallMs: MIN_USEFUL_CALL_MS, probeRoom: () => true });
    if (gate.kind !== 'go') throw new DependencyUnavailable(dependency, gate.until, gate.kind === 'wait');
    const admission = await infrastructureCall('breaker_admission', dependency, () => deps.breakers.admit(dependency, token));
    if (admission.allowed) return admission.probe ? token : undefined;
    // Half-open with its probes taken: the verdict comes with their answers, and a failed probe
    // reopens it for openMs, so look again by then rather than at the probes' lease expiry.
    const openMs = ownEntry(deps.config.dependencies, dependency)?.breaker.openMs ?? 0;
    const until = admission.state === 'half_open' ? Math.min(admission.retryAt, deps.now() + openMs) : admission.retryAt;
    const canWait = run.class === 'batch' || until + MIN_USEFUL_CALL_MS <= run.deadline;
    throw new DependencyUnavailable(dependency, until, canWait);
  }

  /**
   * Takes the dependency permit for one call; resolves to its release. A release that fails is
   * logged, not thrown: the call is over either way, and the permit's lease expires.
   */
  async takePermit(run: RunRequested, dependency: string): Promise<() => Promise<void>> {
    const release = await infrastructureCall('dependency_permit', dependency, () => this.deps.dependencyPermits.acquire(dependency, run));
    return () => release().catch((err: unknown) => this.deps.logger.warn({ err, runId: run.runId, dependency }, 'could not release a dependency permit; its lease will expire'));
  }

  /** A breaker that cannot be told an outcome must not fail the run: the window just misses one call. */
  async record(dependency: string, probe: string | undefined, outcome: BreakerOutcome, durationMs: number): Promise<void> {
    try {
      const after = await this.deps.breakers.record(dependency, probe, outcome, durationMs);
      if (after.changed) this.deps.logger.warn({ dependency, state: after.state, outcome }, 'this call moved the breaker');
    } catch (err) {
      this.deps.logger.warn({ err, dependency }, 'could not record a call outcome with the breaker');
    }
  }
}
