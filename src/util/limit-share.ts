/**
 * Permits a scope may hold at a share of a limit: the batch class's share of the global limit, or
 * a dependency's ramp-up share after its breaker closed. At least one while the limit is open,
 * none while it is closed (0). permits-acquire.lua applies the same rule to the limit in force.
 */
export function limitAtShare(limit: number, share: number): number {
  if (limit === 0) return 0;
  // The epsilon keeps 100 × 0.57 (= 56.99999…) from losing a whole permit to binary rounding.
  return Math.max(1, Math.floor(limit * Math.min(1, share) + 1e-9));
}

/**
 * A tenant's fair part of a shared limit (a dependency's cap) while `othersWaiting` other tenants
 * wait for it: all of it while nobody else waits, else an even split, at least one while the
 * limit is open. permits-acquire.lua applies the same rule to the limit in force.
 */
export function fairShareLimit(limit: number, othersWaiting: number): number {
  if (limit === 0 || othersWaiting <= 0) return limit;
  return Math.max(1, Math.floor(limit / (othersWaiting + 1)));
}
