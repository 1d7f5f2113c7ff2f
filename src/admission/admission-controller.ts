import type { SluiceConfig, TenantConfig, WorkflowConfig } from '../config/schema.js';
import type { RunClass } from '../events/schemas.js';
import type { Metrics } from '../obs/metrics.js';
import {
  bucketRefusal,
  decideFromBacklog,
  dependenciesOf,
  dependencyRefusal,
  effectiveRefill,
  maxAheadForDeadline,
  slotsFor,
  unavailable,
  type AdmissionDecision,
  type DependencyState,
} from './admission-policy.js';
import type { AdmissionStore, BacklogRun } from './admission-store.js';
import type { ServiceState } from './service-state.js';

export interface AdmissionRequest {
  runId: string;
  tenantId: string;
  tenant: TenantConfig;
  workflow: WorkflowConfig;
  runClass: RunClass;
  deadline: number;
  now: number;
}

/**
 * Where a request is admitted or turned away: the breaker check (no I/O), the tenant's token
 * bucket (one EVALSHA), then the bounded backlog with the deadline estimate (one EVALSHA). In
 * observe mode every decision is computed and counted, and the run is admitted regardless.
 */
export class AdmissionController {
  constructor(
    private readonly config: SluiceConfig,
    private readonly store: AdmissionStore,
    private readonly state: ServiceState,
    private readonly breakers: { all(): ReadonlyMap<string, DependencyState> },
    private readonly metrics: Metrics,
  ) {}

  async decide(req: AdmissionRequest): Promise<AdmissionDecision> {
    const { admission, limits } = this.config;
    const observe = req.tenant.admission.mode === 'observe';
    const service = this.state.service(req.runClass);
    const open = unavailable(dependenciesOf(req.workflow.steps), this.breakers.all());

    const early = dependencyRefusal(req.runClass, open, req.deadline, req.now, service.serviceTimeMs) ?? bucketRefusal(
      await this.store.takeToken(req.tenantId, req.tenant.admission.bucket.capacity, effectiveRefill(req.tenant.admission.bucket.refillPerSec, open.length > 0, admission.emergencyRefillFactor)),
    );
    if (early && !observe) return this.count(req, early);

    const slots = slotsFor(req.runClass, limits.global, limits.batchShare);
    const maxAhead = maxAheadForDeadline({ deadline: req.deadline, now: req.now, slots, service });
    const backlog = await this.store.admit(
      { runId: req.runId, tenantId: req.tenantId, runClass: req.runClass, leaseExpiry: req.deadline + admission.leaseGraceMs },
      { tenantMax: req.tenant.admission.maxBacklog, globalMax: admission.maxBacklog, maxAhead, recordAnyway: observe },
    );
    const decision = early ?? decideFromBacklog(backlog, { slots, maxAhead, service });
    if (!observe || decision.outcome === 'admitted' || decision.outcome === 'queued') return this.count(req, decision);

    this.metrics.admissionObserved.inc({ tenant: req.tenantId, class: req.runClass, outcome: decision.outcome, reason: decision.reason });
    return this.count(req, decideFromBacklog({ ...backlog, outcome: 'admitted' }, { slots, maxAhead, service }));
  }

  /** Takes back the backlog entry of a run that was admitted but never reached Kafka. */
  async withdraw(run: BacklogRun): Promise<void> {
    await this.store.withdraw(run);
  }

  private count(req: AdmissionRequest, d: AdmissionDecision): AdmissionDecision {
    this.metrics.admissions.inc({ tenant: req.tenantId, class: req.runClass, outcome: d.outcome, reason: d.reason });
    return d;
  }
}
