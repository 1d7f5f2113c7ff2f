import type { RedisClient } from '../redis/client.js';
import { RUN_CLASSES, type RunClass } from '../events/schemas.js';
import type { RedisKeys } from '../redis/keys.js';
import { runIdTime } from '../runs/run-id.js';

export interface BacklogCount {
  tenant: string;
  runClass: RunClass;
  /** Admitted-but-unfinished runs. */
  runs: number;
  /** Admission time (epoch ms) of the oldest of them; undefined when there are none. */
  oldestAdmittedAt: number | undefined;
}

/**
 * Counts the admission backlog per tenant and class from the live members of its zsets (per
 * tenant and per class; a run is in one of each). Every configured tenant and class is counted,
 * zeros included. The oldest run's admission time is read from its id: the API admits a run under
 * a UUIDv7 stamped with its admission time.
 */
export function countBacklog(tenantMembers: ReadonlyMap<string, readonly string[]>, classMembers: ReadonlyMap<RunClass, ReadonlySet<string>>): BacklogCount[] {
  const counts: BacklogCount[] = [];
  for (const [tenant, members] of tenantMembers) {
    for (const runClass of RUN_CLASSES) {
      const inClass = classMembers.get(runClass);
      let runs = 0;
      let oldest: number | undefined;
      for (const runId of members) {
        if (!inClass?.has(runId)) continue;
        runs++;
        const at = runIdTime(runId);
        if (at !== undefined && (oldest === undefined || at < oldest)) oldest = at;
      }
      counts.push({ tenant, runClass, runs, oldestAdmittedAt: oldest });
    }
  }
  return counts;
}

/**
 * Reads the live entries (lease not yet expired) of every tenant's and class's backlog zset in
 * one pipeline. Its cost is the backlog's size (at most `admission.maxBacklog` ids), read by the
 * one active lag monitor per interval.
 */
export async function readBacklog(redis: Pick<RedisClient, 'pipeline'>, keys: RedisKeys, tenants: readonly string[], now = Date.now()): Promise<BacklogCount[]> {
  const pipeline = redis.pipeline();
  for (const t of tenants) pipeline.zrangebyscore(keys.backlogTenant(t), `(${now}`, '+inf');
  for (const c of RUN_CLASSES) pipeline.zrangebyscore(keys.backlogClass(c), `(${now}`, '+inf');
  const replies = ((await pipeline.exec()) ?? []).map(([err, members]) => {
    if (err) throw err;
    return members as string[];
  });
  const tenantMembers = new Map(tenants.map((t, i) => [t, replies[i] ?? []]));
  const classMembers = new Map(RUN_CLASSES.map((c, i) => [c, new Set(replies[tenants.length + i] ?? [])]));
  return countBacklog(tenantMembers, classMembers);
}
