import type { RedisKeys } from '../redis/keys.js';
import type { PermitScope } from '../permits/permit-scopes.js';
import type { PermitLease, PermitStore } from '../permits/permit-store.js';

/** The permit scope whose single permit makes a lag monitor the active one. */
export function monitorScope(keys: RedisKeys): PermitScope {
  // Not a field an operator can set (`PUT /v1/admin/limits` takes global, tenant, workflow and dependency only): always 1.
  return { name: 'lag-monitor', key: keys.permitScope('lag-monitor'), limitField: 'lag-monitor', defaultLimit: 1, share: 1 };
}

/**
 * Which lag monitor is the active one: the holder of the single permit of the `lag-monitor`
 * scope, taken and renewed with the permit scripts (atomic, fenced by a token only the holder
 * knows, lapsing after `ttlMs` when its holder dies). `refresh()` is called every `ttlMs / 3`:
 * it renews a held lease, or tries to take a free one.
 *
 * Unlike the processors' LeaseKeeper, which keeps a lease it cannot renew for as long as Redis
 * does not answer, an active monitor must step down once its lease may have lapsed, or two would
 * export at once: a lease counts as held only until `ttlMs` after the start of the last call that
 * confirmed it (local clock; Redis set the expiry later than that start, so it never outlives it).
 */
export class MonitorLease {
  private lease: PermitLease | undefined;
  private confirmedAt = 0;

  constructor(
    private readonly store: Pick<PermitStore, 'tryAcquire' | 'renew' | 'release'>,
    private readonly scope: PermitScope,
    private readonly opts: { ttlMs: number; owner: string; now?: () => number },
  ) {}

  private now(): number {
    return (this.opts.now ?? Date.now)();
  }

  /** Whether this instance is the active one at this moment. */
  get held(): boolean {
    return this.lease !== undefined && this.now() - this.confirmedAt < this.opts.ttlMs;
  }

  /** Renews or takes the lease; answers `held` afterwards. A Redis failure is thrown, after `held` was updated. */
  async refresh(): Promise<boolean> {
    const started = this.now();
    if (this.lease && !this.held) this.lease = undefined;
    if (this.lease) {
      if (await this.store.renew(this.lease, this.opts.ttlMs)) this.confirmedAt = started;
      else this.lease = undefined;
      return this.held;
    }
    const taken = await this.store.tryAcquire([this.scope], this.opts.ttlMs, this.opts.owner);
    if (taken.granted) {
      this.lease = taken.lease;
      this.confirmedAt = started;
    }
    return this.held;
  }

  /** Gives the lease back at once, so another instance need not wait for it to lapse. */
  async release(): Promise<void> {
    const lease = this.lease;
    this.lease = undefined;
    if (lease) await this.store.release(lease);
  }
}
