/** Stand-in for k6's `check`: evaluates every predicate and records the results. */
export const results: Record<string, boolean>[] = [];

export function check(value: unknown, predicates: Record<string, (v: any) => boolean>): boolean {
  const r = Object.fromEntries(Object.entries(predicates).map(([name, fn]) => [name, fn(value)]));
  results.push(r);
  return Object.values(r).every(Boolean);
}
