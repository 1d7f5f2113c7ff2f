/** Call counters of the provider simulator, read by tests and benchmarks to check caps held. */

export interface CallStatsSnapshot {
  calls: Record<string, number>;
  /** `calls` per target and tenant (the LLM call's `metadata.user_id`, a tool call's `X-Sluice-Tenant`): how a target's capacity was shared. */
  callsByTenant: Record<string, Record<string, number>>;
  /** Fault-injected error answers; rate-limit refusals count in `rateLimited` instead. */
  errors: Record<string, number>;
  /** 429s because a target's rate limit was exceeded. Each is also one of `calls`. */
  rateLimited: Record<string, number>;
  /** Calls in flight now, for every target seen since the last reset. */
  concurrent: Record<string, number>;
  /** `total` is the most calls in flight at once over all targets: a bound on runs holding a global permit. */
  maxConcurrent: { byTarget: Record<string, number>; byTenant: Record<string, number>; total: number };
}

/** One call in flight. All methods are idempotent so every exit path may call them. */
export interface CallTicket {
  fail(): void;
  refuseForRateLimit(): void;
  leave(): void;
}

/** Names beyond the key limit share this bucket, so hostile or buggy tenant ids cannot grow memory. */
export const OTHER_KEY = '_other';
export const DEFAULT_MAX_KEYS = 10_000;

function increment(map: Map<string, number>, key: string): number {
  const next = (map.get(key) ?? 0) + 1;
  map.set(key, next);
  return next;
}

function decrement(map: Map<string, number>, key: string): void {
  const next = (map.get(key) ?? 0) - 1;
  if (next > 0) map.set(key, next);
  else map.delete(key);
}

function raisePeak(peaks: Map<string, number>, key: string, level: number): void {
  if (level > (peaks.get(key) ?? 0)) peaks.set(key, level);
}

export class CallStats {
  private readonly calls = new Map<string, number>();
  private readonly callsByTenant = new Map<string, Map<string, number>>();
  private readonly errors = new Map<string, number>();
  private readonly rateLimited = new Map<string, number>();
  private readonly inFlightByTarget = new Map<string, number>();
  private readonly inFlightByTenant = new Map<string, number>();
  // The peak maps double as the registry of known names: every name entered since the last
  // reset is in them, and a reset re-seeds them with what is still in flight.
  private readonly peakByTarget = new Map<string, number>();
  private readonly peakByTenant = new Map<string, number>();
  private inFlightTotal = 0;
  private peakTotal = 0;

  constructor(private readonly maxKeys: number = DEFAULT_MAX_KEYS) {}

  enter(targetName: string, tenantName: string): CallTicket {
    const target = this.keyFor(this.peakByTarget, targetName);
    const tenant = this.keyFor(this.peakByTenant, tenantName);
    increment(this.calls, target);
    let byTenant = this.callsByTenant.get(target);
    if (byTenant === undefined) this.callsByTenant.set(target, (byTenant = new Map()));
    increment(byTenant, tenant);
    raisePeak(this.peakByTarget, target, increment(this.inFlightByTarget, target));
    raisePeak(this.peakByTenant, tenant, increment(this.inFlightByTenant, tenant));
    this.peakTotal = Math.max(this.peakTotal, ++this.inFlightTotal);
    let failed = false;
    let refused = false;
    let left = false;
    return {
      fail: () => {
        if (failed) return;
        failed = true;
        increment(this.errors, target);
      },
      refuseForRateLimit: () => {
        if (refused) return;
        refused = true;
        increment(this.rateLimited, target);
      },
      leave: () => {
        if (left) return;
        left = true;
        decrement(this.inFlightByTarget, target);
        decrement(this.inFlightByTenant, tenant);
        this.inFlightTotal--;
      },
    };
  }

  /** Starts a new measurement window; calls still in flight keep counting toward concurrency. */
  reset(): void {
    this.calls.clear();
    this.callsByTenant.clear();
    this.errors.clear();
    this.rateLimited.clear();
    this.peakByTarget.clear();
    this.peakByTenant.clear();
    for (const [key, level] of this.inFlightByTarget) this.peakByTarget.set(key, level);
    for (const [key, level] of this.inFlightByTenant) this.peakByTenant.set(key, level);
    this.peakTotal = this.inFlightTotal;
  }

  snapshot(): CallStatsSnapshot {
    return {
      calls: Object.fromEntries(this.calls),
      callsByTenant: Object.fromEntries([...this.callsByTenant].map(([target, byTenant]) => [target, Object.fromEntries(byTenant)])),
      errors: Object.fromEntries(this.errors),
      rateLimited: Object.fromEntries(this.rateLimited),
      concurrent: Object.fromEntries([...this.peakByTarget.keys()].map((key) => [key, this.inFlightByTarget.get(key) ?? 0])),
      maxConcurrent: { byTarget: Object.fromEntries(this.peakByTarget), byTenant: Object.fromEntries(this.peakByTenant), total: this.peakTotal },
    };
  }

  private keyFor(registry: Map<string, number>, name: string): string {
    return registry.has(name) || registry.size < this.maxKeys ? name : OTHER_KEY;
  }
}
