import { gateRun, type BreakerView } from '../breakers/breaker-gate.js';
import type { BreakerAdmission, BreakerOutcome, BreakerStateName } from '../breakers/breaker-store.js';
import { SuccessTally, tallyWindows } from '../breakers/success-tally.js';
import { ownEntry } from '../config/lookup.js';
import type { SluiceConfig } from '../config/schema.js';
import type { RunRequested } from '../events/schemas.js';
import type { Logger } from '../obs/logger.js';
import type { PaceTurn } from '../pacing/dependency-pacer.js';
import type { CallResponse, CallTokens } from '../pacing/pacing-policy.js';
import { MIN_USEFUL_CALL_MS } from '../runs/deadline.js';
import { PrepaidTurnLedger } from '../pacing/prepaid-turns.js';
import { infrastructureCall } from './run-faults.js';
import { adaptiveBounds, loadSignalOf } from '../permits/adaptive-limit-policy.js';
import type { AdaptiveLimitStore } from '../permits/adaptive-limit-store.js';

/**
 * The shared breakers: asked before a call unless this instance follows them live and sees them
 * closed, told every call's outcome (prompt successes while closed in bulk, by `tally`).
 */
export interface SharedBreakers {
  admit(dependency: string, token: string): Promise<BreakerAdmission>;
  record(dependency: string, token: string | undefined, outcome: BreakerOutcome, durationMs: number): Promise<{ state: BreakerStateName; changed: boolean }>;
  tally(dependency: string, calls: number): Promise<boolean>;
}

/** A permit per call at the dependency's scope; resolves to its release, or throws at the deadline. */
export interface DependencyPermits {
  acquire(dependency: string, run: RunRequested): Promise<() => Promise<void>>;
}

/** The shared rate limits of the dependencies (`DependencyPacer`): a call's turn before it, its usage and response after it. */
export interface CallPacer {
  book(dependency: string, tokens: CallTokens, run: Pick<RunRequested, 'class' | 'deadline' | 'tenantId'>, prepaid?: boolean): Promise<PaceTurn>;
  giveBack(dependency: string, tenant: string, calls: number): Promise<void>;
  settle(dependency: string, booked: CallTokens, used: CallTokens): Promise<void>;
  learn(dependency: string, response: CallResponse): Promise<void>;
}

export interface CallGuardDeps {
  config: Pick<SluiceConfig, 'dependencies'>;
  breakers: SharedBreakers;
  /** This instance's view of the breakers, so an open one is not even asked, nor a closed one while `live`. */
  board: { view(dependency: string): BreakerView; live(): boolean };
  dependencyPermits: DependencyPermits;
  /** Absent when `processor.pacing.enabled` is false: calls go out unpaced, with no Redis call. */
  pacer?: CallPacer;
  /** The shared adaptive concurrency figures; absent when caps are not enforced, so nothing adapts. */
  adaptiveLimits?: Pick<AdaptiveLimitStore, 'apply'>;
  logger: Logger;
  now: () => number;
}

/**
 * A call that was not made: the dependency's breaker is open (or its probes are taken), or its
 * turn under the dependency's rate limits is further away than a processor waits.
 */
export class DependencyUnavailable extends Error {
  constructor(
    readonly dependency: string,
    /** When the dependency may next be called. */
    readonly until: number,
    /** Whether the run can wait for that within its deadline; if not, its tenant's fallback applies. */
    readonly canWait: boolean,
    readonly reason: 'breaker_open' | 'rate_limited' = 'breaker_open',
  ) {
    const why = reason === 'breaker_open' ? 'is unavailable (breaker open)' : 'is rate limited: no turn';
    super(`${dependency} ${why} until ${new Date(until).toISOString()}`);
    this.name = 'DependencyUnavailable';
  }
}

/** Whether a run can wait for a dependency until `until`: a batch run always, else if a useful call still fits before its deadline. */
function canWaitUntil(run: RunRequested, until: number): boolean {
  return run.class === 'batch' || until + MIN_USEFUL_CALL_MS <= run.deadline;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * What stands around every call to a dependency: the breaker admits it (or refuses with
 * `DependencyUnavailable`), a permit at the dependency's scope is held for the call itself, and
 * the breaker is told how the call went.
 */
export class CallGuard {
  private readonly successes = new SuccessTally();
  private readonly prepaid = new PrepaidTurnLedger();

  constructor(private readonly deps: CallGuardDeps) {}

  /**
   * Asks the dependency's breaker whether this call may go out; resolves to the probe token when
   * it goes out as a half-open probe. An open breaker this instance already knows of is not asked;
   * nor is a closed one while the board follows the breakers live: Redis would admit the call,
   * and a trip elsewhere reaches the board as fast as it would reach a question.
   */
  async admit(run: RunRequested, dependency: string, token: string): Promise<string | undefined> {
    const { deps } = this;
    const view = deps.board.view(dependency);
    const gate = gateRun({ runClass: run.class, deadline: run.deadline, needed: [dependency], views: new Map([[dependency, view]]), now: deps.now(), minCallMs: MIN_USEFUL_CALL_MS, probeRoom: () => true });
    if (gate.kind !== 'go') throw new DependencyUnavailable(dependency, gate.until, gate.kind === 'wait');
    if (view.state === 'closed' && deps.board.live()) return undefined;
    const admission = await infrastructureCall('breaker_admission', dependency, () => deps.breakers.admit(dependency, token));
    if (admission.allowed) return admission.probe ? token : undefined;
    // Half-open with its probes taken: the verdict comes with their answers, and a failed probe
    // reopens it for openMs, so look again by then rather than at the probes' lease expiry.
    const openMs = ownEntry(deps.config.dependencies, dependency)?.breaker.openMs ?? 0;
    const until = admission.state === 'half_open' ? Math.min(admission.retryAt, deps.now() + openMs) : admission.retryAt;
    throw new DependencyUnavailable(dependency, until, canWaitUntil(run, until));
  }

  /**
   * Waits for the call's turn under the dependency's rate limits, booked across all processors,
   * when it comes within `processor.pacing.maxInlineWaitMs` and the run's deadline; otherwise
   * nothing is booked and the call is refused with `DependencyUnavailable` (`rate_limited`). A
   * call of a first attempt spends a request turn admission reserved for the run while any is left,
   * and books only its tokens.
   */
  async pace(run: RunRequested, dependency: string, tokens: CallTokens): Promise<void> {
    const { pacer } = this.deps;
    if (!pacer) return;
    const notBefore = this.prepaid.take(run, dependency);
    let turn: PaceTurn;
    try {
      turn = await infrastructureCall('pacing', dependency, () => pacer.book(dependency, tokens, run, notBefore !== undefined));
    } catch (err) {
      if (notBefore !== undefined) this.prepaid.putBack(run, dependency);
      throw err;
    }
    if (turn.kind === 'defer') {
      if (notBefore !== undefined) this.prepaid.putBack(run, dependency);
      throw new DependencyUnavailable(dependency, turn.until, canWaitUntil(run, turn.until), 'rate_limited');
    }
    // Booked: the turn is this call's alone, so one wait suffices and nothing is asked again.
    const waitMs = Math.max(turn.waitMs, notBefore === undefined ? 0 : notBefore - this.deps.now());
    if (waitMs > 0) await sleep(waitMs);
  }

  /**
   * Ends a run's attempt for pacing: the request turns reserved for it and not used are given
   * back. Failing is logged, not thrown: the turns just go unused.
   */
  async endAttempt(run: RunRequested): Promise<void> {
    const { pacer } = this.deps;
    const unused = this.prepaid.settle(run, this.deps.now());
    if (!pacer) return;
    await Promise.all(
      unused.map((t) => pacer.giveBack(t.dependency, run.tenantId, t.calls).catch((err: unknown) => this.deps.logger.warn({ err, runId: run.runId, dependency: t.dependency, calls: t.calls }, 'could not give back reserved provider turns'))),
    );
  }

  /**
   * Tells the pacer what a finished call used and what its response said of the provider's
   * limits. Like an outcome the breaker cannot be told, a failure here must not fail the run.
   */
  async afterCall(dependency: string, booked: CallTokens, used: CallTokens | undefined, response: CallResponse): Promise<void> {
    const { pacer } = this.deps;
    if (!pacer) return;
    try {
      await Promise.all([used ? pacer.settle(dependency, booked, used) : undefined, pacer.learn(dependency, response)]);
    } catch (err) {
      this.deps.logger.warn({ err, dependency }, 'could not tell the pacer how a call went');
    }
  }

  /**
   * Takes the dependency permit for one call; resolves to its release. A release that fails is
   * logged, not thrown: the call is over either way, and the permit's lease expires.
   */
  async takePermit(run: RunRequested, dependency: string): Promise<() => Promise<void>> {
    const release = await infrastructureCall('dependency_permit', dependency, () => this.deps.dependencyPermits.acquire(dependency, run));
    return () => release().catch((err: unknown) => this.deps.logger.warn({ err, runId: run.runId, dependency }, 'could not release a dependency permit; its lease will expire'));
  }

  /**
   * Moves the dependency's shared adaptive concurrency figure by how a call went (`error`
   * undefined: it succeeded) and how long it took holding its permit, when the dependency has
   * `adaptiveConcurrency`. A figure that cannot be moved must not fail the run: it just misses one call.
   */
  async adapt(dependency: string, error: unknown, callMs: number): Promise<void> {
    const { adaptiveLimits, logger } = this.deps;
    const dep = ownEntry(this.deps.config.dependencies, dependency);
    const bounds = dep && adaptiveBounds(dep);
    if (!adaptiveLimits || !dep?.adaptiveConcurrency || !bounds) return;
    const signal = loadSignalOf(error, callMs, dep.adaptiveConcurrency.latencyTargetMs);
    if (!signal) return;
    try {
      const after = await adaptiveLimits.apply(dependency, signal, bounds, dep.adaptiveConcurrency);
      if (after.cut) logger.info({ dependency, limit: after.limit, callMs }, 'congestion: lowered the adaptive concurrency limit');
    } catch (err) {
      logger.warn({ err, dependency }, 'could not update the adaptive concurrency limit');
    }
  }

  /**
   * Tells the breaker how a call went. A prompt success of a call that was no probe, while the
   * board sees the breaker closed, is counted here and sent in bulk (`SuccessTally`); any other
   * outcome goes at once, after the successes counted so far. A breaker that cannot be told an
   * outcome must not fail the run: the window just misses those calls.
   */
  async record(dependency: string, probe: string | undefined, outcome: BreakerOutcome, durationMs: number): Promise<void> {
    const { deps } = this;
    const policy = ownEntry(deps.config.dependencies, dependency)?.breaker;
    const now = deps.now();
    try {
      if (policy && probe === undefined && outcome === 'success' && durationMs < policy.slowCallMs && deps.board.view(dependency).state === 'closed') {
        const calls = this.successes.add(dependency, now, tallyWindows(policy.windowMs));
        if (calls > 0) await deps.breakers.tally(dependency, calls);
        return;
      }
      const earlier = policy ? this.successes.take(dependency, now, policy.windowMs) : 0;
      // One connection, in order: the tally lands before the outcome is judged.
      const [, after] = await Promise.all([earlier > 0 ? deps.breakers.tally(dependency, earlier) : undefined, deps.breakers.record(dependency, probe, outcome, durationMs)]);
      if (after.changed) deps.logger.warn({ dependency, state: after.state, outcome }, 'this call moved the breaker');
    } catch (err) {
      deps.logger.warn({ err, dependency }, 'could not record a call outcome with the breaker');
    }
  }
}
