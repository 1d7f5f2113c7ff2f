import type { RedisClient } from '../redis/client.js';
import type { RunClass, RunStatusChanged } from '../events/schemas.js';
import type { RedisKeys } from '../redis/keys.js';

/**
 * Runs waiting for a dependency, cluster-wide: those whose latest status is `waiting_dependency`,
 * held in a processor or waiting in the retry topic. Processors announce both as a status event,
 * so the status sink, which sees every run's events in order, keeps the record: one zset per
 * tenant and class (member runId, score the run's deadline plus a grace), added to when a run's
 * latest event in a batch says waiting and removed from on any later status. The score is a lease:
 * an entry whose later events never come (a run lost with its processor) lapses and stops counting.
 */

/** The runs a batch of status events puts into the record (`waiting`) and takes out (`moved`): each run's latest event decides. */
export function waitingChanges(events: readonly RunStatusChanged[]): { waiting: RunStatusChanged[]; moved: RunStatusChanged[] } {
  const latest = new Map<string, RunStatusChanged>();
  for (const e of events) {
    const seen = latest.get(e.runId);
    if (!seen || e.sequence >= seen.sequence) latest.set(e.runId, e);
  }
  const runs = [...latest.values()];
  return { waiting: runs.filter((e) => e.status === 'waiting_dependency'), moved: runs.filter((e) => e.status !== 'waiting_dependency') };
}

export class WaitingRuns {
  constructor(
    private readonly redis: Pick<RedisClient, 'pipeline'>,
    private readonly keys: RedisKeys,
    /** Added to a run's deadline: how long past it an entry may count. */
    private readonly graceMs: number,
  ) {}

  /** Applies a batch of status events in one pipeline; each command is idempotent, so a redelivered batch changes nothing. */
  async record(events: readonly RunStatusChanged[], now = Date.now()): Promise<void> {
    const { waiting, moved } = waitingChanges(events);
    if (waiting.length === 0 && moved.length === 0) return;
    const pipeline = this.redis.pipeline();
    for (const e of moved) pipeline.zrem(this.keys.waitingRuns(e.tenantId, e.class), e.runId);
    for (const e of waiting) {
      const key = this.keys.waitingRuns(e.tenantId, e.class);
      const expiry = e.deadline + this.graceMs;
      pipeline.zremrangebyscore(key, '-inf', now).zadd(key, expiry, e.runId);
      // The set outlives its latest entry and no longer: set a TTL where there is none, push it out where it is shorter.
      pipeline.pexpireat(key, expiry, 'NX').pexpireat(key, expiry, 'GT');
    }
    for (const [err] of (await pipeline.exec()) ?? []) if (err) throw err;
  }

  /** Runs waiting now per tenant and class, in one pipeline. */
  async counts(tenants: readonly string[], classes: readonly RunClass[], now = Date.now()): Promise<{ tenant: string; runClass: RunClass; runs: number }[]> {
    const pairs = tenants.flatMap((tenant) => classes.map((runClass) => ({ tenant, runClass })));
    const pipeline = this.redis.pipeline();
    for (const p of pairs) pipeline.zcount(this.keys.waitingRuns(p.tenant, p.runClass), `(${now}`, '+inf');
    const replies = (await pipeline.exec()) ?? [];
    return pairs.map((p, i) => {
      const [err, n] = replies[i] ?? [new Error('no reply')];
      if (err) throw err;
      return { ...p, runs: Number(n) };
    });
  }
}
