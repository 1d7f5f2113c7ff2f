import type { Logger } from '../obs/logger.js';
import type { PermitLease, PermitStore } from './permit-store.js';

export interface LeaseKeeperOptions {
  /** The TTL the kept leases were taken with; each renewal extends them by it again. */
  ttlMs: number;
  /** Leases kept at once; `keep` refuses beyond it. */
  maxLeases: number;
  logger: Logger;
}

interface Kept {
  lease: PermitLease;
  onLost: (lease: PermitLease) => void;
  timer: NodeJS.Timeout | undefined;
}

/**
 * Renews held leases every TTL/3 for as long as they are held, so a live holder keeps its permits
 * while a crashed one loses them after one TTL. Two renewals can fail (a Redis blip) before a
 * lease lapses. A lease found lost is reported to its holder, which no longer has the permits and
 * must stop using the capacity they stood for.
 */
export class LeaseKeeper {
  private readonly kept = new Map<string, Kept>();
  private readonly intervalMs: number;
  private readonly log: Logger;

  constructor(
    private readonly store: Pick<PermitStore, 'renew' | 'release'>,
    private readonly opts: LeaseKeeperOptions,
  ) {
    this.intervalMs = Math.max(1, Math.floor(opts.ttlMs / 3));
    this.log = opts.logger.child({ component: 'lease-keeper' });
  }

  get size(): number {
    return this.kept.size;
  }

  /** Starts renewing a lease; `onLost` is called once if a renewal finds it gone. */
  keep(lease: PermitLease, onLost: (lease: PermitLease) => void): void {
    if (this.kept.has(lease.token)) throw new Error(`lease ${lease.token} is already kept`);
    if (this.kept.size >= this.opts.maxLeases) throw new RangeError(`already keeping ${this.opts.maxLeases} leases; release one first`);
    const entry: Kept = { lease, onLost, timer: undefined };
    this.kept.set(lease.token, entry);
    this.schedule(entry);
  }

  /** Stops renewing and gives the permits back; answers how many scopes still held the lease. */
  release(lease: PermitLease): Promise<number> {
    this.forget(lease.token);
    return this.store.release(lease);
  }

  /** Stops every renewal without releasing: on shutdown the leases lapse after their TTL. */
  stop(): void {
    for (const token of [...this.kept.keys()]) this.forget(token);
  }

  private forget(token: string): void {
    const entry = this.kept.get(token);
    if (!entry) return;
    clearTimeout(entry.timer);
    this.kept.delete(token);
  }

  private schedule(entry: Kept): void {
    entry.timer = setTimeout(() => void this.renew(entry), this.intervalMs);
    // Renewals serve work in progress; they must not keep a finished process alive on their own.
    entry.timer.unref();
  }

  private async renew(entry: Kept): Promise<void> {
    entry.timer = undefined;
    const { lease } = entry;
    let held: boolean;
    try {
      held = await this.store.renew(lease, this.opts.ttlMs);
    } catch (err) {
      // Whether the lease survived is unknown until Redis answers again: keep trying.
      if (this.kept.get(lease.token) === entry) this.schedule(entry);
      this.log.warn({ err, token: lease.token }, 'could not renew a permit lease; retrying');
      return;
    }
    // Released (or stopped) while the renewal was in flight: the holder no longer cares.
    if (this.kept.get(lease.token) !== entry) return;
    if (held) return this.schedule(entry);
    this.kept.delete(lease.token);
    this.log.warn({ token: lease.token, scopes: lease.scopes }, 'a permit lease was lost before it was released');
    try {
      entry.onLost(lease);
    } catch (err) {
      this.log.error({ err, token: lease.token }, 'a lost-lease callback threw');
    }
  }
}
