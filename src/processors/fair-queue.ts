import type { RunClass } from '../events/schemas.js';

/** One waiting run, as the scheduler sees it. */
export interface Waiting<T> {
  runClass: RunClass;
  tenant: string;
  item: T;
  enqueuedAt: number;
}

interface ClassLine<T> {
  /** Per tenant, oldest first. */
  byTenant: Map<string, Waiting<T>[]>;
  /** Tenants with waiting work, in the order they are served; the head is served next. */
  rotation: string[];
}

const CLASS_ORDER: readonly RunClass[] = ['interactive', 'batch'];

/**
 * When a tenant's interactive line stands, its newest run goes first (adaptive LIFO): once the
 * oldest has waited this long the line is not being served in time, and the newest has the most
 * time left to meet its deadline, while the oldest would likely expire anyway (the expiry sweep
 * ends it at its deadline). An empty line, or one whose head waited less, is served in order.
 */
export interface LifoPolicy {
  /** How long an interactive line's oldest run may wait before the newest goes first (undefined: always in order). */
  interactiveAfterMs?: number;
  now: () => number;
}

/**
 * Runs waiting for permits, served round-robin across tenants within a class, interactive before
 * batch. A tenant at its cap is skipped, not waited on, so one noisy tenant never blocks another
 * in the same partition (no head-of-line blocking). Batch cannot starve interactive because its
 * permits are capped at a share of the global cap; interactive goes first whenever both can run.
 * Within a tenant's line runs go oldest first, except an interactive line that stands (`LifoPolicy`).
 */
export class FairQueue<T> {
  private readonly lines = new Map<RunClass, ClassLine<T>>(CLASS_ORDER.map((c) => [c, { byTenant: new Map(), rotation: [] }]));
  private count = 0;

  constructor(private readonly lifo?: LifoPolicy) {}

  get size(): number {
    return this.count;
  }

  sizeOf(runClass: RunClass): number {
    let n = 0;
    for (const q of this.line(runClass).byTenant.values()) n += q.length;
    return n;
  }

  /** When the longest-waiting run of a class was queued, or undefined when none waits. */
  oldest(runClass: RunClass): number | undefined {
    let oldest: number | undefined;
    for (const q of this.line(runClass).byTenant.values()) if (q[0] && (oldest === undefined || q[0].enqueuedAt < oldest)) oldest = q[0].enqueuedAt;
    return oldest;
  }

  /** Every waiting run, class by class and tenant by tenant. */
  *[Symbol.iterator](): IterableIterator<Waiting<T>> {
    for (const line of this.lines.values()) for (const q of line.byTenant.values()) yield* q;
  }

  push(w: Waiting<T>): void {
    const line = this.line(w.runClass);
    const q = line.byTenant.get(w.tenant);
    if (q) q.push(w);
    else {
      line.byTenant.set(w.tenant, [w]);
      line.rotation.push(w.tenant);
    }
    this.count++;
  }

  /**
   * The next run to try, without removing it: the head of the first tenant in rotation that
   * `blocked` does not exclude. Interactive is tried before batch.
   */
  peek(blocked: (runClass: RunClass, tenant: string) => boolean): Waiting<T> | undefined {
    for (const runClass of CLASS_ORDER) {
      const line = this.line(runClass);
      for (const tenant of line.rotation) {
        if (!blocked(runClass, tenant)) return this.next(runClass, line.byTenant.get(tenant)!);
      }
    }
    return undefined;
  }

  private next(runClass: RunClass, q: readonly Waiting<T>[]): Waiting<T> {
    const after = runClass === 'interactive' ? this.lifo?.interactiveAfterMs : undefined;
    if (after === undefined || q.length < 2 || this.lifo!.now() - q[0]!.enqueuedAt <= after) return q[0]!;
    return q[q.length - 1]!;
  }

  /** Removes a tenant's head run (after it got its permits) and moves the tenant to the back of the rotation. */
  take(w: Waiting<T>): void {
    const line = this.line(w.runClass);
    const q = line.byTenant.get(w.tenant);
    if (q?.[0] === w) q.shift();
    else if (q?.[q.length - 1] === w) q.pop();
    else throw new Error('take() must be given the run that peek() returned');
    this.count--;
    const at = line.rotation.indexOf(w.tenant);
    line.rotation.splice(at, 1);
    if (q.length > 0) line.rotation.push(w.tenant);
    else line.byTenant.delete(w.tenant);
  }

  /**
   * Puts a run taken with `take` back in its place in its tenant's line, by the time it was queued
   * (its permits were refused), with the tenant first in the rotation again, so the refusal costs
   * it no place.
   */
  putBack(w: Waiting<T>): void {
    const line = this.line(w.runClass);
    const q = line.byTenant.get(w.tenant);
    if (!q) line.byTenant.set(w.tenant, [w]);
    else if (q.length === 0 || w.enqueuedAt <= q[0]!.enqueuedAt) q.unshift(w);
    else {
      const at = q.findIndex((x) => x.enqueuedAt > w.enqueuedAt);
      q.splice(at < 0 ? q.length : at, 0, w);
    }
    const at = line.rotation.indexOf(w.tenant);
    if (at >= 0) line.rotation.splice(at, 1);
    line.rotation.unshift(w.tenant);
    this.count++;
  }

  /** Drops every waiting run matching `predicate` (e.g. of a revoked partition) and returns them. */
  removeWhere(predicate: (item: T) => boolean): Waiting<T>[] {
    const removed: Waiting<T>[] = [];
    for (const line of this.lines.values()) {
      for (const [tenant, q] of line.byTenant) {
        const keep = q.filter((w) => !predicate(w.item));
        removed.push(...q.filter((w) => predicate(w.item)));
        if (keep.length > 0) line.byTenant.set(tenant, keep);
        else {
          line.byTenant.delete(tenant);
          line.rotation.splice(line.rotation.indexOf(tenant), 1);
        }
      }
    }
    this.count -= removed.length;
    return removed;
  }

  private line(runClass: RunClass): ClassLine<T> {
    return this.lines.get(runClass)!;
  }
}
