import type { DeadLetterReason } from '../dlq/dead-letter.js';
import { ownEntry } from '../config/lookup.js';
import type { SluiceConfig, TenantConfig, WorkflowConfig } from '../config/schema.js';
import type { RunRequested } from '../events/schemas.js';
import { StepError } from '../steps/step-error.js';
import { fullJitterMs, type RetryPolicy } from '../retries/retry-policy.js';

/** Why a run ends without (further) attempts: the DLQ reason, and the error its reader is shown. */
export interface RunFailure {
  /** `sluice-dlt-reason`: `unknown_tenant`, `unknown_workflow`, `infrastructure_error`. */
  reason: Extract<DeadLetterReason, 'unknown_tenant' | 'unknown_workflow' | 'infrastructure_error'>;
  /** `error.code` of the `failed` status. */
  code: string;
  message: string;
  /** Whether a replay may succeed as it is (an outage passes; a missing tenant needs a config change). */
  retryable: boolean;
}

/**
 * The calls an attempt makes to Sluice's own infrastructure, outside any step's dependency. When
 * one fails the run has not failed: the attempt is repeated (see `afterInfrastructureFailure`).
 */
const INFRA_OPERATIONS = {
  run_permits: { action: 'taking run permits', system: 'Redis' },
  breaker_admission: { action: 'asking the shared breaker', system: 'Redis' },
  dependency_permit: { action: 'taking a dependency permit', system: 'Redis' },
  pacing: { action: "booking a call's turn under the rate limits", system: 'Redis' },
  retry_enqueue: { action: 'producing the next attempt to the retry topic', system: 'Kafka' },
  dead_letter: { action: 'producing to the DLQ topic', system: 'Kafka' },
  outcome_publish: { action: 'publishing the run outcome', system: 'Kafka' },
  unexpected: { action: 'running the attempt', system: 'processor' },
} as const;

/** A metric label: one of a fixed set. */
export type InfraOperation = keyof typeof INFRA_OPERATIONS;

/** An infrastructure call of an attempt failed; the message names the operation, the system and the cause. */
export class InfrastructureError extends Error {
  constructor(
    readonly operation: InfraOperation,
    /** What the operation was for, e.g. the dependency whose permit was asked for. */
    subject: string | undefined,
    cause: unknown,
  ) {
    const { action, system } = INFRA_OPERATIONS[operation];
    const detail = cause instanceof Error ? cause.message : String(cause);
    super(`${action}${subject === undefined ? '' : ` for ${subject}`} (${system}) failed: ${detail}`, { cause });
    this.name = 'InfrastructureError';
  }
}

/**
 * Awaits a call to Sluice's own infrastructure, naming the operation if it fails, so the dispatcher
 * can repeat the attempt and the DLQ says what failed; a step error (a permit wait that reached the
 * deadline) passes through as it is.
 */
export async function infrastructureCall<T>(operation: InfraOperation, subject: string | undefined, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    throw err instanceof StepError ? err : new InfrastructureError(operation, subject, err);
  }
}

/** Any other error escaping an attempt is a processor fault, handled like an infrastructure one. */
export function asInfrastructureError(err: unknown): InfrastructureError {
  return err instanceof InfrastructureError ? err : new InfrastructureError('unexpected', undefined, err);
}

export type InfraFailureDecision = { kind: 'retry'; at: number } | { kind: 'dead_letter' };

/**
 * What to do with a run whose attempt has now failed `failures` times on the infrastructure: run
 * it again in this processor at `at` (full jitter, as step retries), or give up and dead-letter it
 * once `policy.maxAttempts` attempts failed. A retry is never due after a deadline still ahead,
 * so a run that cannot finish in time is reported expired on time rather than a backoff later.
 */
export function afterInfrastructureFailure(opts: { failures: number; policy: RetryPolicy; now: number; deadline: number; random: () => number }): InfraFailureDecision {
  const { failures, policy, now, deadline } = opts;
  if (failures >= policy.maxAttempts) return { kind: 'dead_letter' };
  const at = now + Math.max(1, fullJitterMs(failures - 1, policy, opts.random));
  return { kind: 'retry', at: deadline > now ? Math.min(at, deadline) : at };
}

/**
 * The wait before trying again to record a run's end (DLQ produce, failed status) after `tries`
 * failed: unbounded in number, since the record must not be committed before its end is recorded,
 * but capped in length so the run completes soon after Kafka is back; never zero, so no busy loop.
 */
export function keepTryingDelayMs(tries: number, policy: RetryPolicy, random: () => number): number {
  return Math.min(policy.capMs, policy.baseMs + fullJitterMs(tries, policy, random));
}

/** The end of a run whose attempts kept failing on the infrastructure: replayable once it is back. */
export function infrastructureFailure(error: InfrastructureError, failures: number): RunFailure {
  return { reason: 'infrastructure_error', code: 'infrastructure_error', message: `gave up after ${failures} failed attempts: ${error.message}`, retryable: true };
}

export type RunConfig = { ok: true; tenant: TenantConfig; workflow: WorkflowConfig } | { ok: false; failure: RunFailure };

/**
 * The tenant and workflow a run names, as this processor is configured. A run admitted before its
 * tenant or workflow was removed from the config can never run here: it ends at once, without
 * asking for permits (there are none for an unknown scope), rather than waiting forever.
 */
export function resolveRunConfig(config: Pick<SluiceConfig, 'tenants' | 'workflows'>, run: Pick<RunRequested, 'tenantId' | 'workflow'>): RunConfig {
  const tenant = ownEntry(config.tenants, run.tenantId);
  if (!tenant) return { ok: false, failure: unconfigured('unknown_tenant', `tenant "${run.tenantId}" is not configured on this processor`) };
  const workflow = ownEntry(config.workflows, run.workflow);
  if (!workflow) return { ok: false, failure: unconfigured('unknown_workflow', `workflow "${run.workflow}" is not configured on this processor`) };
  return { ok: true, tenant, workflow };
}

function unconfigured(reason: 'unknown_tenant' | 'unknown_workflow', message: string): RunFailure {
  return { reason, code: reason, message, retryable: false };
}
