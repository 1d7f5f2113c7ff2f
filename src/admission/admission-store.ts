import type { RunClass } from '../events/schemas.js';
import type { RedisKeys } from '../redis/keys.js';
import type { LuaScripts } from '../redis/scripts.js';
import type { BacklogResult } from './admission-policy.js';
import { SERVICE_BUCKET_SEC } from './service-state.js';
import type { BucketRefusalMemo } from './bucket-refusal-memo.js';
import type { BucketTake } from './local-token-bucket.js';

/** Buckets of finish counts kept beyond the longest rate window (seconds / bucket size, plus one). */
const SERVICE_BUCKETS_KEPT = 361;
/** Weight of the newest run in the moving execution time. */
const SERVICE_TIME_WEIGHT = 0.1;

export interface BacklogRun {
  runId: string;
  tenantId: string;
  runClass: RunClass;
}


/** One run of `token-bucket-take.lua` on a bucket key, its answer parsed. */
export async function takeFromBucket(scripts: LuaScripts, key: string, capacity: number, refillPerSec: number, cost: number): Promise<BucketTake> {
  const [allowed, tokens, waitMs] = (await scripts.run('tokenBucketTake', [key], [capacity, refillPerSec, cost])) as [number, string, number];
  return { allowed: allowed === 1, tokensLeft: Number(tokens), waitMs: Number(waitMs) };
}

/** Where a bucket refusal answered from memory is reported (the bucket's kind: submit or read). */
export type MemoAnswered = (bucket: 'submit' | 'read') => void;

/**
 * The thin Redis side of admission: each call is one EVALSHA of one script in `lua/`. With a
 * `BucketRefusalMemo`, a bucket known to be short of tokens is refused without asking Redis.
 */
export class AdmissionStore {
  constructor(
    private readonly scripts: LuaScripts,
    private readonly keys: RedisKeys,
    private readonly memo?: { refusals: BucketRefusalMemo; answered: MemoAnswered; now?: () => number },
  ) {}

  takeToken(tenant: string, capacity: number, refillPerSec: number, cost = 1): Promise<BucketTake> {
    return this.take('submit', this.keys.tenantBucket(tenant), capacity, refillPerSec, cost);
  }

  /** The tenant's read bucket: the same script on its own key, so reads never spend submit tokens. */
  takeReadToken(tenant: string, capacity: number, refillPerSec: number): Promise<BucketTake> {
    return this.take('read', this.keys.readBucket(tenant), capacity, refillPerSec, 1);
  }

  async admit(run: { runId: string; tenantId: string; runClass: RunClass; leaseExpiry: number }, bounds: { tenantMax: number; globalMax: number; maxAhead: number | undefined; maxTenantAhead?: number | undefined; recordAnyway: boolean }): Promise<BacklogResult> {
    const res = (await this.scripts.run(
      'backlogAdmit',
      [this.keys.backlogTenant(run.tenantId), this.keys.backlogClass(run.runClass), this.keys.backlogAll()],
      [run.runId, run.leaseExpiry, bounds.tenantMax, bounds.globalMax, bounds.maxAhead ?? 'none', bounds.recordAnyway ? 1 : 0, bounds.maxTenantAhead ?? 'none'],
    )) as [BacklogResult['outcome'], number, number, number];
    return { outcome: res[0], tenantCount: Number(res[1]), classAhead: Number(res[2]), allCount: Number(res[3]) };
  }

  /** True the first time a finished run is released; it then counts towards the class's service rate. */
  release(run: BacklogRun, executionMs: number | undefined): Promise<boolean> {
    return this.remove(run, executionMs, true);
  }

  /** Takes back an entry for a run Kafka never accepted; it does not count as served. */
  withdraw(run: BacklogRun): Promise<boolean> {
    return this.remove(run, undefined, false);
  }

  private async take(bucket: 'submit' | 'read', key: string, capacity: number, refillPerSec: number, cost: number): Promise<BucketTake> {
    if (!this.memo) return takeFromBucket(this.scripts, key, capacity, refillPerSec, cost);
    const { refusals, answered, now = Date.now } = this.memo;
    const rate = { capacity, refillPerSec };
    // Taken before asking: Redis counts the wait from a moment after this one, so the memo never
    // refuses past the moment the tokens exist.
    const asked = now();
    const remembered = refusals.refusal(key, rate, cost, asked);
    if (remembered) {
      answered(bucket);
      return remembered;
    }
    const take = await takeFromBucket(this.scripts, key, capacity, refillPerSec, cost);
    refusals.learn(key, rate, cost, take, asked);
    return take;
  }

  private async remove(run: BacklogRun, executionMs: number | undefined, finished: boolean): Promise<boolean> {
    const removed = await this.scripts.run(
      'backlogRelease',
      [this.keys.backlogTenant(run.tenantId), this.keys.backlogClass(run.runClass), this.keys.backlogAll(), this.keys.serviceStats(run.runClass)],
      [run.runId, executionMs ?? -1, SERVICE_BUCKET_SEC, SERVICE_BUCKETS_KEPT, SERVICE_TIME_WEIGHT, finished ? 1 : 0],
    );
    return removed === 1;
  }
}
