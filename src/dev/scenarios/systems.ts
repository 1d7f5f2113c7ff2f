/**
 * The two systems a scenario runs against, built from the same parts (the same binary and
 * local.yaml's tenants, workflows and dependencies): Sluice as configured, and the naive
 * configuration a team without Sluice's controls runs. Pure: each takes the local config document
 * and answers a new one.
 */

export const SYSTEMS = ['sluice', 'naive'] as const;
export type SystemName = (typeof SYSTEMS)[number];

/** Big enough never to bind: the naive system accepts and starts everything. */
const UNBOUNDED = 1_000_000;
const UNBOUNDED_BACKLOG = 10_000_000;
/** The most runs one processor holds at once (processor.maxInFlight's own bound). */
const NAIVE_IN_FLIGHT = 10_000;
/** What the Anthropic SDK does by default: 2 retries, exponential backoff from 0.5 s up to 8 s. */
const SDK_DEFAULT_RETRY = { maxAttempts: 3, baseMs: 500, capMs: 8_000 };

const clone = <T>(doc: T): T => structuredClone(doc);

/** Sluice as local.yaml configures it: admission, caps, breakers, pacing and retries on. */
export function sluiceSystem(local: Record<string, any>): Record<string, any> {
  return clone(local);
}

/**
 * The naive system: admission always answers 202 with no bound on the backlog (buckets and
 * backlogs too large to bind); caps are not enforced and one processor starts up to 10,000 runs
 * at once; breakers never open (their thresholds cannot be reached); no pacing; and the only
 * retries are the SDK's defaults, 3 attempts with exponential backoff from 0.5 s to 8 s that
 * honour `retry-after`, for every call with no retry budget. Sluice's processor retries a call
 * that names a `retry-after` through the retry topic, so the SDK's attempts are run-level
 * attempts here and steps do not retry on their own (one retry layer, as the SDK has). No tenant
 * has a declared fallback: a failed run is a failure the client sees.
 */
export function naiveSystem(local: Record<string, any>): Record<string, any> {
  const c = clone(local);
  c.limits = { global: UNBOUNDED, batchShare: 1 };
  c.admission = { ...c.admission, maxBacklog: UNBOUNDED_BACKLOG * 10 };
  c.processor = {
    ...c.processor,
    enforceCaps: false,
    maxInFlight: NAIVE_IN_FLIGHT,
    partitionBuffer: NAIVE_IN_FLIGHT,
    maxInlineRetryWaitMs: 0,
    runRetry: SDK_DEFAULT_RETRY,
    pacing: { enabled: false },
  };
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
  }
  return c;
}

export const SYSTEM_BUILDERS: Record<SystemName, (local: Record<string, any>) => Record<string, any>> = { sluice: sluiceSystem, naive: naiveSystem };

/** LLM calls one run of each workflow makes when every call succeeds: what one offered run asks of the provider. */
export function llmCallsPerRun(doc: Record<string, any>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, w] of Object.entries<any>(doc.workflows ?? {})) out[name] = (w.steps as { kind: string }[]).filter((s) => s.kind === 'llm').length;
  return out;
}
