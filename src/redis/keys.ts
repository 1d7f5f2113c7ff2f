/**
 * Every Redis key Sluice uses, under the configured namespace. Keys that one Lua script touches
 * together share a hash tag (`{...}`), so each script's keys live in one Redis Cluster slot.
 */
export type RedisKeys = ReturnType<typeof redisKeys>;

export function redisKeys(namespace: string) {
  const ns = `${namespace}sluice`;
  const admission = `{${ns}:admission}`;
  // One tag for every permit key: one acquisition spans global, class, tenant and workflow scopes
  // and reads the limits hash atomically. The slot is hot, the price of all-or-nothing caps.
  const permits = `{${ns}:permits}`;
  const waiting = `{${ns}:waiting}`;
  return {
    /** Token bucket of one tenant (hash: tokens, ts). */
    tenantBucket: (tenant: string) => `${ns}:bucket:{${tenant}}`,
    /** Token bucket of one tenant's reads of its runs (hash: tokens, ts), in the tenant's slot too. */
    readBucket: (tenant: string) => `${ns}:reads:{${tenant}}`,
    /** Admitted-but-unfinished runs (zset: runId → lease expiry ms), per tenant, per class and overall. */
    backlogTenant: (tenant: string) => `${admission}:backlog:tenant:${tenant}`,
    backlogClass: (runClass: string) => `${admission}:backlog:class:${runClass}`,
    backlogAll: () => `${admission}:backlog:all`,
    /** Finished runs per time bucket and a moving service time, per class (hash). */
    serviceStats: (runClass: string) => `${admission}:service:${runClass}`,
    /** Token budget of one tenant (hash: tokens, ts), in the tenant's slot with its request bucket. */
    tokenBudget: (tenant: string) => `${ns}:tokens:{${tenant}}`,
    /** Set once a run's token reservation was given back, so it is never given back twice (expires after the run's deadline). */
    tokenReservationReturned: (tenant: string, runId: string) => `${ns}:tokens:{${tenant}}:returned:${runId}`,
    /** Moving input+output tokens per completed run of one workflow (hash: per_run, samples). */
    tokenEstimate: (workflow: string) => `${admission}:tokens:workflow:${workflow}`,
    /** Idempotency record of one tenant's key (hash: state, requestHash, token, status, body). */
    idempotency: (tenant: string, keyDigest: string) => `${ns}:idem:{${tenant}}:${keyDigest}`,
    /** A run's completed steps (hash: step id → output JSON), so a redelivered run does not repeat them (expires after the deadline). */
    runSteps: (runId: string) => `${ns}:steps:{${runId}}`,
    /** A run's provider calls over its attempts (hash: `c:<dependency>` → calls) and whether its end was counted (`end`); expires after the deadline. */
    runCalls: (runId: string) => `${ns}:calls:{${runId}}`,
    /** Set while a run's cancellation is requested; expires with the run's deadline. In the run's slot with its steps, read together. */
    cancelRequested: (runId: string) => `${ns}:cancel:{${runId}}`,
    /** Set while a submission's answer (202 or 503) is not decided; a processor waits for it before starting the run. In the run's slot. */
    answerPending: (runId: string) => `${ns}:answer-pending:{${runId}}`,
    /** Holders of one concurrency scope (zset: lease token → lease expiry ms), e.g. `tenant:acme`. */
    permitScope: (scope: string) => `${permits}:scope:${scope}`,
    /** Concurrency limits changed at run time (hash: scope → limit), overriding config on every instance. */
    permitLimits: () => `${permits}:limits`,
    /**
     * A dependency's adaptive concurrency figure (hash: limit, decreasedAt), expiring when idle. In the
     * permit slot, not the dependency's, so permits-acquire.lua reads it in the same atomic step.
     */
    adaptiveLimit: (dependency: string) => `${permits}:adaptive:${dependency}`,
    /** The tenants waiting for a dependency's permits (zset: tenant → claim expiry ms), for its fair shares. */
    permitWaiting: (dependency: string) => `${permits}:waiting:${dependency}`,
    /** One tenant's calls waiting for a dependency's permits (zset: caller → claim expiry ms). */
    permitWaitingCalls: (dependency: string, tenantId: string) => `${permits}:waiting:${dependency}:tenant:${tenantId}`,
    /**
     * Each processor's state for the console (hash: instance → JSON {until, since: {scope → ms}, paused,
     * held}), written by processor-state-publish.lua. One key, so no hash tag: it stays out of the busy permit slot.
     */
    processorState: () => `${ns}:processor-state`,
    /** Sharded pub/sub channel announcing released permits (payload: the scopes, space-separated), in the permit slot. */
    permitReleased: () => `${permits}:released`,
    /** Shared breaker state of a dependency (hash: state, retryAt); written by the breaker scripts. */
    breaker: (dependency: string) => `${ns}:breaker:{${dependency}}`,
    /** A dependency's sliding window of outcomes (hash: `<bucket>:c|f|s` → calls, failures, slow calls). */
    breakerWindow: (dependency: string) => `${ns}:breaker:{${dependency}}:window`,
    /** A half-open dependency's probe calls in flight (zset: caller token → lease expiry ms). */
    breakerProbes: (dependency: string) => `${ns}:breaker:{${dependency}}:probes`,
    /** A dependency's retry budget window, shared by every processor (hash: `c:<bucket>` → calls, `r:<bucket>` → retries). */
    retryBudget: (dependency: string) => `${ns}:retry-budget:{${dependency}}`,
    /** An operator's override of a dependency's breaker for a drill (hash: mode open|closed, until ms, at ms), expiring at `until`. */
    breakerForced: (dependency: string) => `${ns}:breaker:{${dependency}}:forced`,
    /** Sharded pub/sub channel announcing a dependency's breaker transitions and forces (payload: JSON, see BreakerTransition and BreakerForceChange), in its breaker's slot. */
    breakerChanged: (dependency: string) => `${ns}:breaker:{${dependency}}:changed`,
    /** A dependency's rate-limit buckets (hash: tat:<bucket>, rate:<bucket>, at); written by the pacing scripts, expires when idle. */
    paceState: (dependency: string) => `${ns}:pace:{${dependency}}`,
    /** Per-minute limits the dependency's provider reported (hash: bucket → limit), kept for `processor.pacing.observedLimitTtlMs`. */
    paceObserved: (dependency: string) => `${ns}:pace:{${dependency}}:observed`,
    /** Server-time ms before which no call to the dependency goes (after a 429 with retry-after, or remaining = 0); expires then. */
    paceNotBefore: (dependency: string) => `${ns}:pace:{${dependency}}:not-before`,
    /** Each tenant's own bucket and demand for a dependency's requests limit (hash: tat:<t>, rate:<t>, d:<t> decayed units asked, u:<t> ms), written by the pacing scripts. */
    paceTenants: (dependency: string) => `${ns}:pace:{${dependency}}:tenants`,
    /** Runs of a tenant and class whose latest status is waiting_dependency (zset: runId → lease expiry ms), kept by the status sink. */
    waitingRuns: (tenant: string, runClass: string) => `${waiting}:tenant:${tenant}:class:${runClass}`,
    /** The active lag monitor's last report (JSON, expiring), read by `sluice lag`. */
    lagReport: () => `${ns}:lag-monitor:report`,
    /** One operations-console session (JSON: csrf token, expiry), by the SHA-256 of its cookie token; expires with the session. */
    consoleSession: (tokenDigest: string) => `${ns}:console:session:${tokenDigest}`,
  };
}
