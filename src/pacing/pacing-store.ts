import type { RedisKeys } from '../redis/keys.js';
import type { LuaScripts } from '../redis/scripts.js';

/**
 * A dependency's rate limits, each a bucket of its own: requests per second and per minute (any
 * dependency), input and output tokens per minute (an LLM's provider counts them apart).
 */
export const PACE_BUCKETS = ['requests_per_second', 'requests', 'input_tokens', 'output_tokens'] as const;
export type PaceBucket = (typeof PACE_BUCKETS)[number];

/** One bucket's part in a reservation: its configured limit (0: none, unless the provider reported one) and the call's cost in it. */
export interface BucketCharge {
  bucket: PaceBucket;
  perMinute: number;
  cost: number;
}

/**
 * Either the call is booked and may go after `waitMs` (0: now), or nothing is booked and it would
 * have needed `waitMs`; `heldByShare`: the tenant's share, not the dependency's capacity, is what
 * makes it wait.
 */
export interface PaceReservation {
  reserved: boolean;
  waitMs: number;
  heldByShare: boolean;
}

/** Whose turn it is in the requests limit, and that tenant's part of it (`fair-share.ts`). */
export interface TenantTurn {
  tenant: string;
  share: number;
  borrow: number;
  /** The share of the burst that borrowing leaves to tenants within their shares, in [0, 1). */
  borrowReserve: number;
  /** How long a tenant's asked units count towards its demand (exponential decay). */
  demandWindowMs: number;
}

export interface ReserveOptions {
  /** The most the caller may wait; a longer wait books nothing. Negative: only ask. */
  maxWaitMs: number;
  /** Each bucket's burst, as ms of its rate (at least one unit). */
  burstMs: number;
  /** How long the state outlives its last booking, so the call's settlement still finds it. */
  keepMs: number;
  /** The share of every limit in force, in (0, 1]: below 1 while the dependency ramps up after its breaker closed. */
  share: number;
  /** The share of each bucket's burst this call leaves to calls of a higher class, in [0, 1]. */
  reserve: number;
}

/**
 * The thin Redis side of the cluster-wide pacing of dependency calls: each call is one EVALSHA of
 * a pacing script in `lua/`, with the dependency's keys under its hash tag.
 */
export class PacingStore {
  constructor(
    private readonly scripts: LuaScripts,
    private readonly keys: RedisKeys,
  ) {}

  /** `turn` absent: the requests limit is not shared by tenant for this call. */
  async reserve(dependency: string, charges: readonly BucketCharge[], opts: ReserveOptions, turn?: TenantTurn): Promise<PaceReservation> {
    const args = charges.flatMap((c) => [c.bucket, c.perMinute, c.cost]);
    const [reserved, waitMs, held] = (await this.scripts.run(
      'pacingReserve',
      [this.keys.paceState(dependency), this.keys.paceObserved(dependency), this.keys.paceNotBefore(dependency), this.keys.paceTenants(dependency)],
      [opts.maxWaitMs, opts.burstMs, opts.keepMs, opts.share, opts.reserve, turn?.tenant ?? '', turn?.share ?? 1, turn?.borrow ?? 1, turn?.borrowReserve ?? 0, turn?.demandWindowMs ?? 1, ...args],
    )) as [number, number, number];
    return { reserved: reserved === 1, waitMs: Number(waitMs), heldByShare: held === 1 };
  }

  /** `deltas`: units used minus units booked, per bucket (the tenant's own bucket follows the requests one); zero deltas are not sent. */
  async settle(dependency: string, deltas: readonly { bucket: PaceBucket; delta: number }[], keepMs: number, tenant = ''): Promise<void> {
    const args = deltas.filter((d) => d.delta !== 0).flatMap((d) => [d.bucket, d.delta]);
    if (args.length === 0) return;
    await this.scripts.run('pacingSettle', [this.keys.paceState(dependency), this.keys.paceTenants(dependency)], [keepMs, tenant, ...args]);
  }

  /**
   * Records the provider's reported per-minute limits and the capacity seen (kept `keepMs`) and a
   * not-before time; resolves to the not-before in force (0: none).
   */
  async observe(dependency: string, limits: readonly { bucket: PaceBucket; perMinute: number; capacity: number }[], notBefore: number | undefined, keepMs: number): Promise<number> {
    const args = limits.flatMap((l) => [l.bucket, l.perMinute, l.capacity]);
    return Number(await this.scripts.run('pacingObserve', [this.keys.paceObserved(dependency), this.keys.paceNotBefore(dependency)], [keepMs, notBefore ?? 0, ...args]));
  }
}
