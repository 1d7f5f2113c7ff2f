import { ownEntry } from '../config/lookup.js';
import type { DependencyConfig, SluiceConfig } from '../config/schema.js';
import type { RunClass } from '../events/schemas.js';
import type { Metrics } from '../obs/metrics.js';
import { MIN_USEFUL_CALL_MS } from '../runs/deadline.js';
import type { FairShareBoard } from './fair-share-board.js';
import { effectiveLimits, inlineWaitBound, isRequestBucket, paceCharges, providerReport, settleDeltas, NO_TOKENS, type CallResponse, type CallTokens } from './pacing-policy.js';
import type { PaceBucket, PaceReservation, PacingStore } from './pacing-store.js';

/** A call's turn: it goes after `waitMs` (booked), or it is not made and the run comes back at `until`. */
export type PaceTurn = { kind: 'go'; waitMs: number } | { kind: 'defer'; until: number };

/** Who a call is for, as pacing needs it. */
export interface PacedRun {
  class: RunClass;
  tenantId: string;
}

export interface DependencyPacerDeps {
  store: Pick<PacingStore, 'reserve' | 'settle' | 'observe'>;
  /** The tenants' shares of each requests limit; absent: the limit is first come, first served. */
  shares?: Pick<FairShareBoard, 'turn' | 'limitsRequests' | 'asksInteractive'>;
  config: Pick<SluiceConfig, 'dependencies' | 'processor'>;
  metrics: Metrics;
  now: () => number;
  /** The share of its limits a dependency may use now: below 1 while it ramps up after its breaker closed. */
  rampShare: (dependency: string) => number;
}

/**
 * Paces every call to a dependency by its rate limits, across all processors: books the call's
 * turn before it, corrects the booking by its real usage after it, and learns the limits its
 * provider reports. Throws what the store throws; the call guard decides what that means.
 */
export class DependencyPacer {
  /** The limits this instance last learned, for the rate-limit gauge (Redis holds the shared ones). */
  private readonly observed = new Map<string, { limits: Map<PaceBucket, number>; until: number }>();
  /** The gauge series last published per dependency, so a changed source replaces its series. */
  private readonly published = new Map<string, { bucket: PaceBucket; source: string }[]>();

  constructor(private readonly deps: DependencyPacerDeps) {
    for (const name of Object.keys(deps.config.dependencies)) this.publishLimits(name);
  }

  /**
   * Books the call's turn if it comes soon enough to wait for in the processor before the run's
   * deadline; a batch call's turn leaves interactive calls a share of the burst. A call whose
   * request turn its run reserved at admission (`prepaid`) books only its tokens.
   */
  async book(dependency: string, tokens: CallTokens, run: PacedRun & { deadline: number }, prepaid = false): Promise<PaceTurn> {
    const { metrics, now } = this.deps;
    const dep = this.dependency(dependency);
    const charges = dep ? paceCharges(dep, tokens).filter((c) => !(prepaid && isRequestBucket(c.bucket))) : [];
    if (!dep || charges.length === 0) return { kind: 'go', waitMs: 0 };
    const pacing = this.deps.config.processor.pacing;
    const asked = now();
    const maxWaitMs = inlineWaitBound({ maxInlineWaitMs: pacing.maxInlineWaitMs, now: asked, deadline: run.deadline, minCallMs: MIN_USEFUL_CALL_MS });
    const res = await this.reserve(dependency, dep, charges, run, maxWaitMs);
    if (!res.reserved) {
      metrics.pacingDeferred.inc({ dependency, class: run.class });
      return { kind: 'defer', until: asked + res.waitMs };
    }
    metrics.pacingWait.observe({ dependency }, res.waitMs / 1000);
    return { kind: 'go', waitMs: res.waitMs };
  }

  /**
   * Reserves at admission the request turns of a run's `calls` calls to the dependency, all
   * available within `maxWaitMs`, or nothing. Its calls then book only their tokens (`prepaid`).
   * Undefined: nothing limits the dependency's requests, so there is nothing to reserve.
   */
  async bookTurns(dependency: string, calls: number, run: PacedRun, maxWaitMs: number): Promise<PaceReservation | undefined> {
    const dep = this.dependency(dependency);
    const charges = dep ? paceCharges(dep, NO_TOKENS).filter((c) => isRequestBucket(c.bucket)).map((c) => ({ ...c, cost: calls })) : [];
    // Nothing limits it (as the shares last read): no Redis call for the submission.
    const unlimited = this.deps.shares !== undefined && !this.deps.shares.limitsRequests(dependency) && dep?.rateLimit?.requestsPerSecond === undefined;
    if (!dep || charges.length === 0 || unlimited) return undefined;
    return this.reserve(dependency, dep, charges, run, maxWaitMs);
  }

  /**
   * Whether a batch run of the tenant may reserve its turns on the dependency far ahead: only if
   * the tenant asks for no interactive turns there lately, since booking at the door fixes the order
   * of turns and the tenant's later interactive runs would wait behind them.
   */
  batchMayReserveAhead(dependency: string, tenant: string): boolean {
    return this.deps.shares !== undefined && !this.deps.shares.asksInteractive(dependency, tenant);
  }

  /** Gives back request turns a run reserved and did not use. */
  async giveBack(dependency: string, tenant: string, calls: number): Promise<void> {
    const dep = this.dependency(dependency);
    if (!dep || calls <= 0) return;
    const deltas = paceCharges(dep, NO_TOKENS).filter((c) => isRequestBucket(c.bucket)).map((c) => ({ bucket: c.bucket, delta: -calls }));
    await this.deps.store.settle(dependency, deltas, this.keepMs(dep), tenant);
  }

  private async reserve(dependency: string, dep: DependencyConfig, charges: ReturnType<typeof paceCharges>, run: PacedRun, maxWaitMs: number): Promise<PaceReservation> {
    const pacing = this.deps.config.processor.pacing;
    const requests = charges.find((c) => c.bucket === 'requests');
    const res = await this.deps.store.reserve(
      dependency,
      charges,
      {
        maxWaitMs,
        burstMs: (dep.rateLimit?.burstSeconds ?? 1) * 1000,
        keepMs: this.keepMs(dep),
        share: this.deps.rampShare(dependency),
        reserve: run.class === 'batch' ? pacing.interactiveReserve : 0,
      },
      requests && this.deps.shares ? this.deps.shares.turn(dependency, run.tenantId) : undefined,
    );
    this.publishLimits(dependency);
    if (res.reserved && requests) this.deps.metrics.pacingTurns.inc({ dependency, tenant: run.tenantId }, requests.cost);
    return res;
  }

  /** Gives back (or charges) the difference between the tokens booked for a call and those it used. */
  async settle(dependency: string, booked: CallTokens, used: CallTokens): Promise<void> {
    const dep = this.dependency(dependency);
    if (dep?.kind !== 'llm') return;
    await this.deps.store.settle(dependency, settleDeltas(booked, used), this.keepMs(dep));
  }

  /** Shares what a response said of its provider's limits with every processor. */
  async learn(dependency: string, response: CallResponse): Promise<void> {
    const dep = this.dependency(dependency);
    if (!dep) return;
    const ttlMs = this.deps.config.processor.pacing.observedLimitTtlMs;
    const now = this.deps.now();
    const report = providerReport({ kind: dep.kind, ...response, now, horizonMs: ttlMs });
    if (report.limits.length === 0 && report.notBefore === undefined) return;
    await this.deps.store.observe(dependency, report.limits, report.notBefore, ttlMs);
    if (report.limits.length > 0) {
      this.observed.set(dependency, { limits: new Map(report.limits.map((l) => [l.bucket, l.perMinute])), until: now + ttlMs });
      this.publishLimits(dependency);
    }
  }

  private dependency(name: string): DependencyConfig | undefined {
    return ownEntry(this.deps.config.dependencies, name);
  }

  /** The state must outlive the longest call it booked, or that call's settlement finds nothing. */
  private keepMs(dep: DependencyConfig): number {
    return dep.timeouts.totalMs + this.deps.config.processor.pacing.maxInlineWaitMs;
  }

  private publishLimits(dependency: string): void {
    const dep = this.dependency(dependency);
    if (!dep) return;
    const seen = this.observed.get(dependency);
    if (seen && seen.until <= this.deps.now()) this.observed.delete(dependency);
    const gauge = this.deps.metrics.dependencyRateLimit;
    for (const old of this.published.get(dependency) ?? []) gauge.remove({ dependency, ...old });
    const limits = effectiveLimits(dep, this.observed.get(dependency)?.limits ?? new Map());
    const share = this.deps.rampShare(dependency);
    for (const l of limits) gauge.set({ dependency, bucket: l.bucket, source: l.source }, l.perMinute * share);
    this.published.set(dependency, limits.map((l) => ({ bucket: l.bucket, source: l.source })));
  }
}
