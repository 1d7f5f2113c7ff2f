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

/** Either the call is booked and may go after `waitMs` (0: now), or nothing is booked and it would have needed `waitMs`. */
export interface PaceReservation {
  reserved: boolean;
  waitMs: number;
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

  async reserve(dependency: string, charges: readonly BucketCharge[], opts: ReserveOptions): Promise<PaceReservation> {
    const args = charges.flatMap((c) => [c.bucket, c.perMinute, c.cost]);
    const [reserved, waitMs] = (await this.scripts.run(
      'pacingReserve',
      [this.keys.paceState(dependency), this.keys.paceObserved(dependency), this.keys.paceNotBefore(dependency)],
      [opts.maxWaitMs, opts.burstMs, opts.keepMs, opts.share, opts.reserve, ...args],
    )) as [number, number];
    return { reserved: reserved === 1, waitMs: Number(waitMs) };
  }

  /** `deltas`: units used minus units booked, per bucket; zero deltas are not sent. */
  async settle(dependency: string, deltas: readonly { bucket: PaceBucket; delta: number }[], keepMs: number): Promise<void> {
    const args = deltas.filter((d) => d.delta !== 0).flatMap((d) => [d.bucket, d.delta]);
    if (args.length === 0) return;
    await this.scripts.run('pacingSettle', [this.keys.paceState(dependency)], [keepMs, ...args]);
  }

  /** Records the provider's reported per-minute limits (kept `keepMs`) and a not-before time; resolves to the not-before in force (0: none). */
  async observe(dependency: string, limits: readonly { bucket: PaceBucket; perMinute: number }[], notBefore: number | undefined, keepMs: number): Promise<number> {
    const args = limits.flatMap((l) => [l.bucket, l.perMinute]);
    return Number(await this.scripts.run('pacingObserve', [this.keys.paceObserved(dependency), this.keys.paceNotBefore(dependency)], [keepMs, notBefore ?? 0, ...args]));
  }
}
