import { ownEntry } from '../config/lookup.js';
import type { SluiceConfig } from '../config/schema.js';
import type { Logger } from '../obs/logger.js';
import type { RedisClient } from '../redis/client.js';
import type { RedisKeys } from '../redis/keys.js';
import { numberField } from '../redis/number-field.js';
import { demandPerSec, fairShares, newcomerShare, type TenantDemand, type TenantShare } from './fair-share.js';
import { effectiveLimits } from './pacing-policy.js';
import type { PaceBucket, TenantTurn } from './pacing-store.js';

/** The tenants' demand as `pacing-reserve.lua` keeps it (`d:<t>` decayed units, `u:<t>` when), per second at `now`. */
export function parseTenantDemand(hash: Record<string, string>, now: number, windowMs: number, weightOf: (tenant: string) => number | undefined): TenantDemand[] {
  const out: TenantDemand[] = [];
  for (const [field, value] of Object.entries(hash)) {
    if (!field.startsWith('d:')) continue;
    const tenant = field.slice(2);
    const weight = weightOf(tenant);
    const asked = numberField(value);
    const at = numberField(hash[`u:${tenant}`]);
    if (weight === undefined || asked === undefined || at === undefined) continue;
    out.push({ tenant, weight, perSec: demandPerSec(asked, at, now, windowMs) });
  }
  return out;
}

/** The tenants whose last interactive ask (`i:<t>`, kept by `pacing-reserve.lua`) is within the window. */
export function interactiveAskers(hash: Record<string, string>, now: number, windowMs: number): Set<string> {
  const out = new Set<string>();
  for (const [field, value] of Object.entries(hash)) {
    const at = field.startsWith('i:') ? numberField(value) : undefined;
    if (at !== undefined && now - at < windowMs) out.add(field.slice(2));
  }
  return out;
}

/** The requests limit a dependency is paced at, per second: the configured one or a lower observed one; undefined without either. */
export function requestsPerSec(dep: SluiceConfig['dependencies'][string], observed: Record<string, string>): number | undefined {
  const seen = new Map<PaceBucket, number>();
  const perMinute = numberField(observed.requests);
  if (perMinute !== undefined && perMinute > 0) seen.set('requests', perMinute);
  const limit = effectiveLimits(dep, seen).find((l) => l.bucket === 'requests');
  return limit ? limit.perMinute / 60 : undefined;
}

/**
 * Every tenant's share of every rate-limited dependency's requests limit, recomputed by each
 * instance (API and processor alike) every `fairShare.refreshMs` from the demand the pacing script
 * records: one pipeline per dependency (its keys share one slot). Between refreshes the last
 * shares hold; the script still enforces the dependency's whole limit on every call.
 */
export class FairShareBoard {
  private shares = new Map<string, Map<string, TenantShare>>();
  /** Per dependency, the tenants that asked for interactive turns within the demand window, as of the last refresh. */
  private interactive = new Map<string, Set<string>>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: RedisKeys,
    private readonly config: Pick<SluiceConfig, 'dependencies' | 'tenants' | 'processor'>,
    private readonly logger: Logger,
  ) {}

  async start(): Promise<void> {
    await this.refresh().catch((err: unknown) => this.logger.warn({ err }, 'could not read the tenants’ demand; every tenant gets its weight’s part until it can'));
    this.timer = setInterval(() => {
      this.refresh().catch((err: unknown) => this.logger.warn({ err }, 'could not refresh the tenants’ fair shares; using the last ones'));
    }, this.config.processor.pacing.fairShare.refreshMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /**
   * Whether the dependency's requests are limited (configured, or reported by its provider as of
   * the last refresh): a run's turns on a dependency without a limit need no reservation.
   */
  limitsRequests(dependency: string): boolean {
    return this.shares.has(dependency);
  }

  /** Whether the tenant asked for interactive turns on the dependency within the demand window (as of the last refresh). */
  asksInteractive(dependency: string, tenant: string): boolean {
    return this.interactive.get(dependency)?.has(tenant) ?? false;
  }

  /** The tenant's turn in the dependency's requests limit, as the pacing script takes it. */
  turn(dependency: string, tenant: string): TenantTurn {
    const { borrowReserve, demandWindowMs } = this.config.processor.pacing.fairShare;
    const seen = this.shares.get(dependency);
    const weight = this.weightOf(tenant) ?? 1;
    let share = seen?.get(tenant);
    if (!share) {
      let weightsSeen = 0;
      for (const t of seen?.keys() ?? []) weightsSeen += this.weightOf(t) ?? 1;
      share = newcomerShare(weight, weightsSeen);
    }
    return { tenant, share: share.share, borrow: share.borrow, borrowReserve, demandWindowMs };
  }

  async refresh(): Promise<void> {
    const windowMs = this.config.processor.pacing.fairShare.demandWindowMs;
    const next = new Map<string, Map<string, TenantShare>>();
    const interactive = new Map<string, Set<string>>();
    await Promise.all(
      Object.entries(this.config.dependencies).map(async ([name, dep]) => {
        if (dep.kind !== 'llm' && dep.rateLimit?.requestsPerMinute === undefined) return;
        const results = (await this.redis.pipeline().time().hgetall(this.keys.paceTenants(name)).hgetall(this.keys.paceObserved(name)).exec()) ?? [];
        const [time, tenants, observed] = results.map(([err, value]) => {
          if (err) throw err;
          return value;
        });
        const [sec, usec] = time as [string, string];
        const now = Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
        const capacity = requestsPerSec(dep, (observed ?? {}) as Record<string, string>);
        if (capacity === undefined) return;
        const hash = (tenants ?? {}) as Record<string, string>;
        next.set(name, fairShares(capacity, parseTenantDemand(hash, now, windowMs, (t) => this.weightOf(t))));
        interactive.set(name, interactiveAskers(hash, now, windowMs));
      }),
    );
    this.shares = next;
    this.interactive = interactive;
  }

  private weightOf(tenant: string): number | undefined {
    return ownEntry(this.config.tenants, tenant)?.weight;
  }
}
