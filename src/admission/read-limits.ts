import type { SluiceConfig, TenantConfig } from '../config/schema.js';
import { ownEntry } from '../config/lookup.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import { withTimeout } from '../util/with-timeout.js';
import { bucketRefusal } from './admission-policy.js';
import type { AdmissionStore } from './admission-store.js';
import type { BucketTake } from './local-token-bucket.js';
import { LocalTokenBuckets } from './local-token-bucket.js';

/** Why a read was turned away and when to come back; becomes `429 rate_limited`. */
export interface ReadRefusal {
  detail: string;
  retryAfterSec: number;
}

export type StreamOpening = { granted: true; release: () => void } | { granted: false; refusal: ReadRefusal };

/** A read-limit check waits this long for Redis before this instance decides alone. */
export const READ_LIMIT_TIMEOUT_MS = 250;
/**
 * A stream is held until its run ends (seconds for interactive work), so a slot frees up soon but
 * at no moment anyone can compute; the hint matches the instance-wide bound's.
 */
export const STREAM_RETRY_AFTER_SEC = 5;

/**
 * Event streams open on this instance per tenant, each tenant up to its own bound. Tenants come
 * from authentication (config), so the map is bounded by the config.
 */
export class StreamSlots {
  private readonly held = new Map<string, number>();

  count(tenantId: string): number {
    return this.held.get(tenantId) ?? 0;
  }

  /** A slot and its release (safe to call more than once), or undefined when `max` are held. */
  tryTake(tenantId: string, max: number): (() => void) | undefined {
    const n = this.count(tenantId);
    if (n >= max) return undefined;
    this.held.set(tenantId, n + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = this.count(tenantId) - 1;
      if (left > 0) this.held.set(tenantId, left);
      else this.held.delete(tenantId);
    };
  }
}

export interface ReadLimitsDeps {
  config: Pick<SluiceConfig, 'tenants'>;
  store: Pick<AdmissionStore, 'takeReadToken'>;
  metrics: Pick<Metrics, 'readRefusals' | 'readLimitFallbacks'>;
  logger: Logger;
  now?: () => number;
  timeoutMs?: number;
}

/**
 * Per-tenant bounds on reads of runs (`GET /v1/runs/:id`, event-stream connects, `DELETE
 * /v1/runs/:id`). The read bucket lives in Redis, shared by every API instance. Reads fail open:
 * when Redis does not answer in time the instance decides from a bucket of its own with the same
 * size, so an outage neither blocks status reads nor lifts the bound (it becomes per instance).
 * Stream slots are per instance: what a stream holds (a socket, a feed subscription, a poll of
 * Postgres every 2 s) is this instance's.
 */
export class ReadLimits {
  private readonly local = new LocalTokenBuckets();
  private readonly streams = new StreamSlots();
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly timeoutMs: number;
  private fallingBack = false;

  constructor(private readonly deps: ReadLimitsDeps) {
    this.log = deps.logger.child({ component: 'read-limits' });
    this.now = deps.now ?? Date.now;
    this.timeoutMs = deps.timeoutMs ?? READ_LIMIT_TIMEOUT_MS;
  }

  /** One read by the tenant: undefined when it may go ahead. */
  async take(tenantId: string): Promise<ReadRefusal | undefined> {
    const { bucket } = this.tenant(tenantId).reads;
    let take: BucketTake;
    try {
      take = await withTimeout(this.deps.store.takeReadToken(tenantId, bucket.capacity, bucket.refillPerSec), this.timeoutMs, 'the read bucket');
      if (this.fallingBack) this.log.info('the read bucket in Redis answers again');
      this.fallingBack = false;
    } catch (err) {
      // Logged when it starts, not per read: an outage would otherwise log every request.
      if (!this.fallingBack) this.log.warn({ err }, 'the read bucket in Redis did not answer; this instance limits reads on its own until it does');
      this.fallingBack = true;
      this.deps.metrics.readLimitFallbacks.inc({ tenant: tenantId });
      take = this.local.take(tenantId, bucket, this.now());
    }
    const refusal = bucketRefusal(take);
    if (!refusal) return undefined;
    this.deps.metrics.readRefusals.inc({ tenant: tenantId, reason: 'rate_limited' });
    return { detail: 'this tenant is reading faster than its read rate; retry after the indicated time', retryAfterSec: refusal.retryAfterSec! };
  }

  /** A slot for one event stream; release it when the stream closes. */
  openStream(tenantId: string): StreamOpening {
    const max = this.tenant(tenantId).reads.maxStreams;
    const release = this.streams.tryTake(tenantId, max);
    if (release) return { granted: true, release };
    this.deps.metrics.readRefusals.inc({ tenant: tenantId, reason: 'streams_full' });
    return { granted: false, refusal: { detail: `this tenant has ${max} event streams open on this instance, as many as it may; close one or retry later`, retryAfterSec: STREAM_RETRY_AFTER_SEC } };
  }

  private tenant(tenantId: string): TenantConfig {
    const tenant = ownEntry(this.deps.config.tenants, tenantId);
    if (!tenant) throw new Error(`no tenant "${tenantId}" in the configuration`);
    return tenant;
  }
}
