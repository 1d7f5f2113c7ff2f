import type { SluiceConfig, TenantConfig, WorkflowConfig } from '../config/schema.js';
import { ownEntry } from '../config/lookup.js';
import { dependenciesOf } from '../config/workflows.js';
import type { RunClass } from '../events/schemas.js';
import type { Metrics } from '../obs/metrics.js';
import { slotsFor } from '../permits/permit-scopes.js';
import {
  bucketRefusal,
  decideFromBacklog,
  dependencyRefusal,
  effectiveRefill,
  maxAheadForDeadline,
  maxTenantAhead,
  queueWaitMs,
  unavailable,
  type AdmissionDecision,
  type DependencyState,
} from './admission-policy.js';
import type { AdmissionStore, BacklogRun } from './admission-store.js';
import { budgetCost, RESERVATION_MARKER_GRACE_MS, tokenBudgetRefusal, tokenEstimate, tokenPrior } from './token-budget.js';
import type { TokenBudgetStore } from './token-budget-store.js';
import type { ServiceState } from './service-state.js';
import type { RedisOutageFallback } from './redis-outage.js';
import type { Logger } from '../obs/logger.js';
import { infrastructureFailure } from '../util/infrastructure-failure.js';
import type { DependencyPacer } from '../pacing/dependency-pacer.js';
import type { PrepaidTurns } from '../events/schemas.js';
import { turnRefusal, turnsNeeded, turnWaitBound, turnWaits, type TurnAnswer } from './turn-prediction.js';

export interface AdmissionRequest {
  runId: string;
  tenantId: string;
  tenant: TenantConfig;
  workflowName: string;
  workflow: WorkflowConfig;
  runClass: RunClass;
  deadline: number;
  now: number;
  /** The request carries an Idempotency-Key (decides what a Redis outage allows). */
  idempotencyKey: boolean;
}

/** Tokens a run reserved from its tenant's budget, and its deadline (how long a give-back is remembered). */
export interface TokenReservation {
  tokens: number;
  deadline: number;
}

/** Who is asking, when Redis could not be asked. */
export type OutageRequest = Pick<AdmissionRequest, 'tenantId' | 'runClass' | 'idempotencyKey' | 'now'>;

/**
 * Where a request is admitted or turned away: the breaker check (no I/O), the tenant's token
 * bucket (one EVALSHA), the tenant's token budget if it has one (one EVALSHA, taking the
 * workflow's estimated tokens per run; given back if the backlog then refuses), then the bounded
 * backlog with the deadline estimate (one EVALSHA). In observe mode every decision is computed and
 * counted, and the run is admitted regardless. When Redis does not answer, the outage policy
 * decides instead (`admission.redisOutage`).
 */
export class AdmissionController {
  constructor(
    private readonly config: SluiceConfig,
    private readonly store: AdmissionStore,
    private readonly state: ServiceState,
    private readonly breakers: { all(): ReadonlyMap<string, DependencyState> },
    private readonly metrics: Metrics,
    private readonly outage: RedisOutageFallback,
    private readonly logger: Logger,
    private readonly tokens: TokenBudgetStore,
    /** Reserves the provider turns of an admitted run's calls; absent when pacing is off. */
    private readonly pacer?: Pick<DependencyPacer, 'bookTurns' | 'giveBack' | 'batchMayReserveAhead'>,
  ) {
    // The bounds this instance admits against, so alerts and dashboards can compare the backlog with them.
    for (const [tenant, t] of Object.entries(config.tenants)) metrics.backlogLimit.set({ tenant }, t.admission.maxBacklog);
    metrics.globalBacklogLimit.set(config.admission.maxBacklog);
  }

  async decide(req: AdmissionRequest): Promise<AdmissionDecision> {
    let decision: AdmissionDecision;
    try {
      decision = await this.decideInRedis(req);
    } catch (err) {
      if (!infrastructureFailure(err)) throw err;
      return this.redisUnreachable(req, err);
    }
    const ended = this.outage.redisAnswered(req.now);
    if (ended) this.logger.info({ ...ended, policy: this.outage.policy }, 'Redis answers again: admission decides in Redis again');
    return decision;
  }

  /**
   * The outage policy's answer for a request Redis could not decide (the token bucket, the backlog
   * or the Idempotency-Key claim failed with an infrastructure error). The outage's first failure
   * is logged; every decision is counted.
   */
  redisUnreachable(req: OutageRequest, err: unknown): AdmissionDecision {
    const { outcome, decision, began } = this.outage.decide(req.tenantId, req.idempotencyKey, req.now);
    if (began) this.logger.warn({ err, policy: this.outage.policy }, 'Redis is unreachable: admission follows the outage policy until it answers');
    this.metrics.admissionOutageDecisions.inc({ dependency: 'redis', policy: this.outage.policy, outcome });
    return this.count(req, decision);
  }

  private async decideInRedis(req: AdmissionRequest): Promise<AdmissionDecision> {
    const { admission, limits } = this.config;
    const observe = req.tenant.admission.mode === 'observe';
    const service = this.state.service(req.runClass);
    const open = unavailable(dependenciesOf(req.workflow.steps), this.breakers.all());

    let early = dependencyRefusal(req.runClass, open, req.deadline, req.now, service.serviceTimeMs, admission.interactiveWaitShare) ?? bucketRefusal(
      await this.store.takeToken(req.tenantId, req.tenant.admission.bucket.capacity, effectiveRefill(req.tenant.admission.bucket.refillPerSec, open.length > 0, admission.emergencyRefillFactor)),
    );
    let reserved = 0;
    const budget = req.tenant.admission.tokenBudget;
    if (!early && budget) {
      const cost = budgetCost(tokenEstimate(this.state.tokensPerRun(req.workflowName), tokenPrior(req.workflow, this.config.dependencies)), budget);
      const take = await this.tokens.take(req.tenantId, budget, cost);
      if (take.allowed) reserved = cost;
      early = tokenBudgetRefusal(take);
    }
    if (early && !observe) return this.count(req, early);

    const slots = slotsFor(req.runClass, limits.global, limits.batchShare);
    const maxAhead = maxAheadForDeadline({ deadline: req.deadline, now: req.now, slots, service });
    // The tenant's own cap is a line of its own: its runs wait for it whatever the class's line.
    const waitBudgetMs = turnWaitBound({ runClass: req.runClass, now: req.now, deadline: req.deadline, calls: 0, serviceTimeMs: service.serviceTimeMs, interactiveWaitShare: admission.interactiveWaitShare });
    const tenantAhead = maxTenantAhead({ cap: req.tenant.maxConcurrency, waitBudgetMs, serviceTimeMs: service.serviceTimeMs });
    const backlog = await this.store.admit(
      { runId: req.runId, tenantId: req.tenantId, runClass: req.runClass, leaseExpiry: req.deadline + admission.leaseGraceMs },
      { tenantMax: req.tenant.admission.maxBacklog, globalMax: admission.maxBacklog, maxAhead, maxTenantAhead: tenantAhead, recordAnyway: observe },
    );
    const backlogDecision = early ?? decideFromBacklog(backlog, { slots, maxAhead, service });
    const reservation = reserved > 0 ? { tokenReservation: reserved } : {};
    const admitted = backlogDecision.outcome === 'admitted' || backlogDecision.outcome === 'queued';
    const inLineMs = queueWaitMs({ classAhead: backlog.classAhead, tenantAhead: backlog.tenantCount }, { class: slots, tenant: req.tenant.maxConcurrency }, service.serviceTimeMs);
    const turns = admitted || observe ? await this.reserveTurns(req, service.serviceTimeMs, inLineMs) : {};
    const decision = (admitted && turns.refusal) || backlogDecision;
    const prepaid = turns.prepaid ? { prepaidTurns: turns.prepaid } : {};
    if (decision.outcome === 'admitted' || decision.outcome === 'queued') return this.count(req, { ...decision, ...reservation, ...prepaid });
    if (!observe) {
      await Promise.all([
        this.giveBack(req.tenantId, req.runId, { tokens: reserved, deadline: req.deadline }),
        decision === turns.refusal ? this.store.withdraw({ runId: req.runId, tenantId: req.tenantId, runClass: req.runClass }) : undefined,
      ]);
      return this.count(req, decision);
    }

    this.metrics.admissionObserved.inc({ tenant: req.tenantId, class: req.runClass, outcome: decision.outcome, reason: decision.reason });
    if (turns.refusal) this.metrics.admissionObserved.inc({ tenant: req.tenantId, class: req.runClass, outcome: turns.refusal.outcome, reason: turns.refusal.reason });
    return this.count(req, { ...decideFromBacklog({ ...backlog, outcome: 'admitted' }, { slots, maxAhead, service }), ...reservation, ...prepaid });
  }

  /**
   * Reserves, for every rate-limited dependency the workflow calls, the request turns of its calls
   * (one script per dependency, sent at once): all of them or none, so a run that starts is never
   * cut short for want of a later turn, and one whose turns come too late is refused now. A
   * dependency that reserved while another refused is given its turns back.
   */
  private async reserveTurns(req: AdmissionRequest, serviceTimeMs: number | undefined, inLineMs: number): Promise<{ prepaid?: PrepaidTurns[]; refusal?: AdmissionDecision }> {
    const { pacer } = this;
    const needed = pacer ? [...turnsNeeded(req.workflow.steps, this.config.dependencies)] : [];
    if (!pacer || needed.length === 0) return {};
    const allCalls = needed.reduce((n, [, c]) => n + c, 0);
    const waits = turnWaits({
      runClass: req.runClass,
      now: req.now,
      deadline: req.deadline,
      calls: allCalls,
      serviceTimeMs,
      interactiveWaitShare: this.config.admission.interactiveWaitShare,
      maxInlineWaitMs: this.config.processor.pacing.maxInlineWaitMs,
    });
    // A run waits for its turns before it joins the line for its permits: the two waits add up.
    const reserveWithinMs = waits.reserveWithinMs - inLineMs;
    const refuseBeyondMs = waits.refuseBeyondMs - inLineMs;
    const run = { class: req.runClass, tenantId: req.tenantId };
    // A batch-only tenant's runs reserve all they may wait for: no interactive run of its own comes after them.
    const within = (dependency: string) => (req.runClass === 'batch' && pacer.batchMayReserveAhead(dependency, req.tenantId) ? refuseBeyondMs : reserveWithinMs);
    const booked = await Promise.all(needed.map(async ([dependency, calls]) => ({ dependency, calls, answer: await pacer.bookTurns(dependency, calls, run, within(dependency)) })));
    const limited = booked.filter((b): b is typeof b & { answer: TurnAnswer } => b.answer !== undefined);
    const refused = limited.filter((b) => !b.answer.reserved).map((b) => b.answer);
    const prepaid = limited.filter((b) => b.answer.reserved).map((b) => ({ dependency: b.dependency, calls: b.calls, notBefore: req.now + b.answer.waitMs }));
    if (refused.length === 0) return prepaid.length > 0 ? { prepaid } : {};
    await this.giveBackTurns(req.tenantId, prepaid);
    const worst = refused.reduce((a, b) => (b.waitMs > a.waitMs ? b : a));
    // A batch run whose turns are not soon, but in time, books them as it goes.
    if (worst.waitMs <= refuseBeyondMs) return {};
    return { refusal: turnRefusal({ ...worst, heldByShare: refused.some((a) => a.heldByShare) }, refuseBeyondMs) };
  }

  /** Gives back turns reserved for a run that will not use them. Failing is logged: the turns just go unused. */
  private async giveBackTurns(tenantId: string, turns: readonly PrepaidTurns[]): Promise<void> {
    const { pacer } = this;
    if (!pacer) return;
    await Promise.all(
      turns.map((t) => pacer.giveBack(t.dependency, tenantId, t.calls).catch((err: unknown) => this.logger.warn({ err, tenantId, dependency: t.dependency, calls: t.calls }, 'could not give back reserved provider turns'))),
    );
  }

  /** Takes back the backlog entry, the reserved tokens and the reserved turns of a run that was admitted but never reached Kafka. */
  async withdraw(run: BacklogRun, reservation?: TokenReservation, turns?: readonly PrepaidTurns[]): Promise<void> {
    await Promise.all([this.store.withdraw(run), reservation ? this.giveBack(run.tenantId, run.runId, reservation) : undefined, turns ? this.giveBackTurns(run.tenantId, turns) : undefined]);
  }

  /**
   * Returns reserved tokens to the tenant's budget. Failing is logged, not thrown: the decision
   * stands, and the budget refills by itself.
   */
  private async giveBack(tenantId: string, runId: string, reservation: TokenReservation): Promise<void> {
    const budget = ownEntry(this.config.tenants, tenantId)?.admission.tokenBudget;
    if (!budget || reservation.tokens <= 0) return;
    try {
      await this.tokens.settle(tenantId, budget, { runId, until: reservation.deadline + RESERVATION_MARKER_GRACE_MS }, { charge: 0, giveBack: reservation.tokens });
    } catch (err) {
      this.logger.warn({ err, tenantId, runId, tokens: reservation.tokens }, 'could not give reserved tokens back to the token budget');
    }
  }

  private count(req: Pick<AdmissionRequest, 'tenantId' | 'runClass'>, d: AdmissionDecision): AdmissionDecision {
    this.metrics.admissions.inc({ tenant: req.tenantId, class: req.runClass, outcome: d.outcome, reason: d.reason });
    return d;
  }
}
