/**
 * Every Redis key Sluice uses, under the configured namespace. Keys that one Lua script touches
 * together share a hash tag (`{...}`), so each script's keys live in one Redis Cluster slot.
 */
export type RedisKeys = ReturnType<typeof redisKeys>;

export function redisKeys(namespace: string) {
  const ns = `${namespace}sluice`;
  const admission = `{${ns}:admission}`;
  return {
    /** Token bucket of one tenant (hash: tokens, ts). */
    tenantBucket: (tenant: string) => `${ns}:bucket:{${tenant}}`,
    /** Admitted-but-unfinished runs (zset: runId → lease expiry ms), per tenant, per class and overall. */
    backlogTenant: (tenant: string) => `${admission}:backlog:tenant:${tenant}`,
    backlogClass: (runClass: string) => `${admission}:backlog:class:${runClass}`,
    backlogAll: () => `${admission}:backlog:all`,
    /** Finished runs per time bucket and a moving service time, per class (hash). */
    serviceStats: (runClass: string) => `${admission}:service:${runClass}`,
    /** Idempotency record of one tenant's key (hash: state, requestHash, token, status, body). */
    idempotency: (tenant: string, keyDigest: string) => `${ns}:idem:{${tenant}}:${keyDigest}`,
    /** Set while a run's cancellation is requested; expires with the run's deadline. */
    cancelRequested: (runId: string) => `${ns}:cancel:{${runId}}`,
    /** Shared breaker state of a dependency (hash: state, retryAt); written by the breaker scripts. */
    breaker: (dependency: string) => `${ns}:breaker:{${dependency}}`,
  };
}
