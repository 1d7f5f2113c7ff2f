/**
 * The two systems a scenario runs against, built from the same parts (the same binary and
 * local.yaml's tenants, workflows and dependencies): Sluice as configured, and the naive
 * configuration a team without Sluice's controls runs. Pure: each takes the local config document
 * and the scenario, and answers a new one.
 */
import type { Scenario } from './scenario.js';

export type SystemName = 'sluice' | 'naive';
/** A system as run: `sluice-without-noisy` is Sluice with the noisy streams left out. */
export const RUN_LABELS = ['sluice', 'sluice-without-noisy', 'naive'] as const;
export type RunLabel = (typeof RUN_LABELS)[number];

/** Big enough never to bind: the naive system accepts and starts everything. */
const UNBOUNDED = 1_000_000;
const UNBOUNDED_BACKLOG = 10_000_000;
const HOUR_MS = 3_600_000;
/** The Anthropic SDK's defaults: 2 retries, and a 10-minute timeout per request. */
const SDK_DEFAULT_RETRIES = 2;
const SDK_DEFAULT_TIMEOUTS = { connectMs: 60_000, readMs: 600_000, totalMs: 600_000 };

const clone = <T>(doc: T): T => structuredClone(doc);

/**
 * Sluice as local.yaml configures it: admission, caps, breakers, pacing and retries on; with the
 * scenario's tenant weights (`tenants.<t>.weight`) for the tenants it weights.
 */
export function sluiceSystem(local: Record<string, any>, scenario: Pick<Scenario, 'tenantWeights'> = {}): Record<string, any> {
  const c = clone(local);
  for (const [tenant, weight] of Object.entries(scenario.tenantWeights ?? {})) c.tenants[tenant] = { ...c.tenants[tenant], weight };
  return c;
}

/**
 * The naive system: admission always answers 202 with no bound on the backlog (buckets and
 * backlogs too large to bind); caps are not enforced (the processor's worker pool,
 * `processor.maxInFlight`, is the same as Sluice's); breakers never open (their thresholds cannot
 * be reached); no pacing; no deadlines (an hour by default; its clients send none). The only
 * retries are the Anthropic SDK's defaults: 2 retries inside the call with exponential backoff that
 * wait out `retry-after`, holding the worker (`sdkMaxRetries`), with call timeouts as long as the
 * SDK's; Sluice's step and run retries are off and tools are called once. No tenant has a declared
 * fallback: a failed run is a failure the client sees. It has no tenant weights either: a scenario's
 * are Sluice's.
 */
export function naiveSystem(local: Record<string, any>): Record<string, any> {
  const c = clone(local);
  c.limits = { global: UNBOUNDED, batchShare: 1 };
  c.admission = { ...c.admission, maxBacklog: UNBOUNDED_BACKLOG * 10 };
  c.api = { ...c.api, deadlineMs: { defaultInteractive: HOUR_MS, defaultBatch: HOUR_MS } };
  c.processor = { ...c.processor, enforceCaps: false, runRetry: { maxAttempts: 1 }, pacing: { enabled: false } };
  for (const t of Object.values<any>(c.tenants)) {
    t.fallback = 'fail';
    t.maxConcurrency = UNBOUNDED;
    t.admission = { bucket: { capacity: UNBOUNDED, refillPerSec: UNBOUNDED }, maxBacklog: UNBOUNDED_BACKLOG };
  }
  for (const w of Object.values<any>(c.workflows)) {
    delete w.fallback;
    if ('maxConcurrency' in w) w.maxConcurrency = UNBOUNDED;
  }
  for (const d of Object.values<any>(c.dependencies)) {
    d.maxConcurrency = 100_000;
    d.retry = { maxAttempts: 1 };
    d.breaker = { minimumCalls: 100_000, failureThreshold: 100_000, failureRateThreshold: 1, slowCallRateThreshold: 1 };
    delete d.rateLimit;
    delete d.adaptiveConcurrency;
    if (d.kind === 'llm') {
      d.sdkMaxRetries = SDK_DEFAULT_RETRIES;
      d.timeouts = SDK_DEFAULT_TIMEOUTS;
    }
  }
  return c;
}

export const SYSTEM_BUILDERS: Record<SystemName, (local: Record<string, any>, scenario: Pick<Scenario, 'tenantWeights'>) => Record<string, any>> = {
  sluice: sluiceSystem,
  naive: naiveSystem,
};

/**
 * LLM calls one run of each workflow makes when every call succeeds: what one offered run asks of
 * the provider. A workflow with an agent step is left out: its model decides how many turns it takes.
 */
export function llmCallsPerRun(doc: Record<string, any>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, w] of Object.entries<any>(doc.workflows ?? {})) {
    const steps = w.steps as { kind: string }[];
    if (!steps.some((s) => s.kind === 'agent')) out[name] = steps.filter((s) => s.kind === 'llm').length;
  }
  return out;
}
