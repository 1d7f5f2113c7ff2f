import type { RunClass, RunRequested } from '../events/schemas.js';

/**
 * Where a run waits out the backoff after an attempt failed on the infrastructure (Redis or Kafka
 * unreachable): one timer per run resubmits it, its record still uncommitted meanwhile.
 */
export class InfraBackoff<T extends { run: RunRequested; source: string }> {
  private readonly timers = new Map<T, NodeJS.Timeout>();

  get size(): number {
    return this.timers.size;
  }

  sizeOf(runClass: RunClass): number {
    let n = 0;
    for (const task of this.timers.keys()) if (task.run.class === runClass) n++;
    return n;
  }

  /** Calls `resubmit(task)` after `delayMs`, unless the task is forgotten or cleared first. */
  wait(task: T, delayMs: number, resubmit: (task: T) => void): void {
    const timer = setTimeout(() => {
      this.timers.delete(task);
      resubmit(task);
    }, delayMs);
    timer.unref();
    this.timers.set(task, timer);
  }

  /** Drops waiting runs of partitions this instance no longer owns; returns how many. */
  forget(source: (s: string) => boolean): number {
    let dropped = 0;
    for (const [task, timer] of this.timers) {
      if (!source(task.source)) continue;
      clearTimeout(timer);
      this.timers.delete(task);
      dropped++;
    }
    return dropped;
  }

  clear(): void {
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }
}
