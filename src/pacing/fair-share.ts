/**
 * How a rate-limited dependency's turns are shared among tenants: weighted max-min fairness
 * (water-filling) over the demand each tenant showed, as plain functions. `lua/pacing-reserve.lua`
 * enforces the result: each tenant has a bucket of its own at its share, and borrows what the
 * others leave.
 */

/** What one tenant asked of a dependency lately, in units per second (requests, for the requests limit). */
export interface TenantDemand {
  tenant: string;
  weight: number;
  perSec: number;
}

/** A tenant's part in a dependency's requests limit, as `pacing-reserve.lua` takes it. */
export interface TenantShare {
  /** The fraction of the rate and burst that is the tenant's own, in (0, 1]. */
  share: number;
  /** The tenant's fraction of what may be borrowed beyond the shares, in (0, 1]. */
  borrow: number;
}

/**
 * Headroom over a tenant's measured demand in its own share: demand is measured over a window, so
 * a tenant within its share still finds room for the next burst of its usual traffic.
 */
export const DEMAND_HEADROOM = 1.25;
/** Below this many units a second a tenant is not counted as wanting the dependency. */
const IDLE_PER_SEC = 0.01;
/** The least share a tenant is given, so its own bucket always refills. */
const MIN_SHARE = 0.001;

/**
 * Each tenant's share of `capacityPerSec` (weighted max-min fair): a tenant that wants less than
 * its weighted part gets what it wants (with headroom), and what it leaves is split among the
 * others by weight, again and again, until every tenant left wants more than its part. Those are
 * the tenants over their share; they split what may be borrowed by weight. A tenant that asked
 * nothing lately is left out, so its part goes to the others (work-conserving).
 */
export function fairShares(capacityPerSec: number, demands: readonly TenantDemand[]): Map<string, TenantShare> {
  const out = new Map<string, TenantShare>();
  let wanting = demands.filter((d) => d.perSec >= IDLE_PER_SEC && d.weight > 0);
  if (capacityPerSec <= 0 || wanting.length === 0) return out;
  let left = capacityPerSec;
  for (;;) {
    const weights = wanting.reduce((w, d) => w + d.weight, 0);
    const satisfied = wanting.filter((d) => d.perSec * DEMAND_HEADROOM <= (left * d.weight) / weights);
    if (satisfied.length === 0) {
      for (const d of wanting) out.set(d.tenant, { share: Math.max(MIN_SHARE, (left * d.weight) / weights / capacityPerSec), borrow: d.weight / weights });
      // A tenant within its share that bursts past it borrows as if it were one of them.
      for (const d of demands) {
        const s = out.get(d.tenant);
        if (s && s.borrow === 0) s.borrow = d.weight / (weights + d.weight);
      }
      return out;
    }
    for (const d of satisfied) {
      const given = d.perSec * DEMAND_HEADROOM;
      left -= given;
      out.set(d.tenant, { share: Math.max(MIN_SHARE, given / capacityPerSec), borrow: 0 });
    }
    wanting = wanting.filter((d) => !satisfied.includes(d));
    if (wanting.length === 0) break;
  }
  // Everyone is within their share: any of them may borrow what is left, by weight.
  const weights = demands.filter((d) => out.has(d.tenant)).reduce((w, d) => w + d.weight, 0);
  for (const d of demands) {
    const s = out.get(d.tenant);
    if (s) s.borrow = d.weight / weights;
  }
  return out;
}

/**
 * The share of a tenant the last computation did not see (it asked nothing lately): its weight's
 * part as if it joined every tenant seen, until its own demand is measured.
 */
export function newcomerShare(weight: number, weightsSeen: number): TenantShare {
  const part = weight / (weightsSeen + weight);
  return { share: part, borrow: part };
}

/** A tenant's demand in units a second from its decayed count: `asked` units decayed exponentially over `windowMs` since `at`. */
export function demandPerSec(asked: number, at: number, now: number, windowMs: number): number {
  if (!(asked > 0) || windowMs <= 0) return 0;
  return (asked * Math.exp(-Math.max(0, now - at) / windowMs)) / (windowMs / 1000);
}
