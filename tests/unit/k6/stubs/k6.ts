/** Stand-in for k6's `check` and `sleep`: every predicate is evaluated and recorded, sleeps are recorded and skipped. */
export const results: { checks: Record<string, boolean>; tags: Record<string, string> | undefined }[] = [];
export const sleptSec: number[] = [];

export function check(value: unknown, predicates: Record<string, (v: any) => boolean>, tags?: Record<string, string>): boolean {
  const checks = Object.fromEntries(Object.entries(predicates).map(([name, fn]) => [name, fn(value)]));
  results.push({ checks, tags });
  return Object.values(checks).every(Boolean);
}

export function sleep(sec: number): void {
  sleptSec.push(sec);
}
