import { parseBreakerHash } from '../../breakers/breaker-board.js';
import type { BreakerForce } from '../../breakers/breaker-gate.js';
import type { BreakerPolicy, BreakerStateName } from '../../breakers/breaker-store.js';
import { ownEntry } from '../../config/lookup.js';
import type { SluiceConfig } from '../../config/schema.js';
import { effectiveLimits, type EffectiveLimit } from '../../pacing/pacing-policy.js';
import { PACE_BUCKETS, type PaceBucket } from '../../pacing/pacing-store.js';
import type { RedisClient } from '../../redis/client.js';
import type { RedisKeys } from '../../redis/keys.js';
import { numberField } from '../../redis/number-field.js';
import { RETRY_BUDGET_BUCKETS } from '../../retries/shared-retry-budget.js';

/** Calls, failures and slow calls in a breaker's sliding window now. */
export interface WindowCounts {
  calls: number;
  failures: number;
  slowCalls: number;
}

/** One rate-limit bucket of a dependency: its limit in force and how much of its burst is taken now. */
export interface PaceUse extends EffectiveLimit {
  /** Units booked ahead of now (calls already granted a later turn count too); above `burst` the bucket is overdrawn. */
  used: number;
  /** The most the bucket holds: `burstSeconds` of its rate. */
  burst: number;
}

/** One dependency as the Dependencies page and `GET /v1/admin/breakers` show it, all read from Redis at `at` (its clock). */
export interface DependencyReport {
  dependency: string;
  kind: 'llm' | 'tool';
  at: number;
  breaker: {
    state: BreakerStateName;
    retryAt: number | null;
    closedAt: number | null;
    /** The operator's force in place, if any (it decides over `state` until `until`). */
    forced: BreakerForce | null;
    probesInFlight: number;
    window: WindowCounts;
    policy: Pick<BreakerPolicy, 'windowMs' | 'minimumCalls' | 'failureThreshold' | 'failureRateThreshold' | 'slowCallMs' | 'slowCallRateThreshold' | 'openMs'>;
  };
  pacing: { buckets: PaceUse[]; notBefore: number | null };
  retryBudget: { calls: number; retries: number; allowed: number; ratio: number; windowMs: number };
}

/**
 * A breaker window hash's sums at `now`, by breaker-window.lua's rule (buckets of windowMs / 10,
 * one counting while its start is inside the window); read-only, so stale buckets are skipped, not deleted.
 */
export function windowCounts(hash: Record<string, string>, now: number, windowMs: number): WindowCounts {
  const width = Math.max(1, Math.floor(windowMs / 10));
  const sums = { c: 0, f: 0, s: 0 };
  for (const [field, value] of Object.entries(hash)) {
    const m = /^(\d+):([cfs])$/.exec(field);
    if (!m || Number(m[1]) * width <= now - windowMs) continue;
    sums[m[2] as 'c' | 'f' | 's'] += numberField(value) ?? 0;
  }
  return { calls: sums.c, failures: sums.f, slowCalls: sums.s };
}

/**
 * Each paced bucket's use at `now`, by pacing-reserve.lua's GCRA: a bucket's theoretical arrival
 * time (`tat:<bucket>`) ahead of now, times its rate, is what is booked and not yet refilled. The
 * rate is the one last charged (it carries a ramp-up share) or, before any charge, the limit's.
 */
export function paceUse(limits: readonly EffectiveLimit[], state: Record<string, string>, now: number, burstMs: number): PaceUse[] {
  const at = numberField(state.at);
  // A server clock stepped back finds `at` ahead: the TATs shift back with it, as the script does.
  const shift = at !== undefined && at > now ? at - now : 0;
  return limits.map((l) => {
    const rate = numberField(state[`rate:${l.bucket}`]) ?? l.perMinute / 60_000;
    const tat = numberField(state[`tat:${l.bucket}`]);
    const used = tat === undefined ? 0 : Math.max(0, tat - shift - now) * rate;
    return { ...l, used, burst: Math.max(1, rate * burstMs) };
  });
}

/** A retry budget window's calls and retries at `now`, by retry-budget-take.lua's rule, and the retries it allows. */
export function retryBudgetUse(hash: Record<string, string>, now: number, policy: { budgetRatio: number; budgetWindowMs: number; budgetMinRetries: number }): DependencyReport['retryBudget'] {
  const bucketMs = policy.budgetWindowMs / RETRY_BUDGET_BUCKETS;
  const oldest = Math.floor(now / bucketMs) - RETRY_BUDGET_BUCKETS + 1;
  let calls = 0;
  let retries = 0;
  for (const [field, value] of Object.entries(hash)) {
    const m = /^([cr]):(-?\d+)$/.exec(field);
    if (!m || Number(m[2]) < oldest) continue;
    if (m[1] === 'c') calls += numberField(value) ?? 0;
    else retries += numberField(value) ?? 0;
  }
  return { calls, retries, allowed: Math.floor(Math.max(policy.budgetRatio * calls, policy.budgetMinRetries)), ratio: policy.budgetRatio, windowMs: policy.budgetWindowMs };
}

const observedLimits = (hash: Record<string, string>) =>
  new Map(PACE_BUCKETS.flatMap((b): [PaceBucket, number][] => {
    const v = numberField(hash[b]);
    return v !== undefined && v > 0 ? [[b, v]] : [];
  }));

/**
 * Reads what the console's Dependencies page shows of each configured dependency: its breaker
 * (state, force, window), its pacing buckets and its retry budget, cluster-wide from Redis. A
 * dependency's keys share its hash tag, so one transaction reads them all at one instant of
 * Redis's clock, on a cluster too.
 */
export class DependencyReports {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: RedisKeys,
    private readonly config: Pick<SluiceConfig, 'dependencies'>,
  ) {}

  all(): Promise<DependencyReport[]> {
    return Promise.all(Object.keys(this.config.dependencies).map((d) => this.one(d)));
  }

  /** Throws RangeError for a dependency not configured. */
  async one(dependency: string): Promise<DependencyReport> {
    const dep = ownEntry(this.config.dependencies, dependency);
    if (!dep) throw new RangeError(`no dependency "${dependency}" is configured`);
    const k = this.keys;
    const replies = await this.redis
      .multi()
      .time()
      .hgetall(k.breaker(dependency))
      .hgetall(k.breakerForced(dependency))
      .hgetall(k.breakerWindow(dependency))
      .zcard(k.breakerProbes(dependency))
      .hgetall(k.paceState(dependency))
      .hgetall(k.paceObserved(dependency))
      .get(k.paceNotBefore(dependency))
      .hgetall(k.retryBudget(dependency))
      .exec();
    const failed = replies?.find(([err]) => err);
    if (!replies || failed) throw failed?.[0] ?? new Error(`the read of dependency "${dependency}" was aborted`);
    const [time, breakerHash, forcedHash, window, probes, paceState, observed, notBefore, retryHash] = replies.map(([, v]) => v) as [
      [string, string], Record<string, string>, Record<string, string>, Record<string, string>, number, Record<string, string>, Record<string, string>, string | null, Record<string, string>,
    ];
    const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
    const view = parseBreakerHash(dependency, breakerHash, forcedHash);
    const p = dep.breaker;
    const notBeforeMs = numberField(notBefore ?? undefined);
    return {
      dependency,
      kind: dep.kind,
      at: now,
      breaker: {
        state: view.state,
        retryAt: view.retryAt ?? null,
        closedAt: view.closedAt ?? null,
        forced: view.forced ?? null,
        probesInFlight: Number(probes),
        window: windowCounts(window, now, p.windowMs),
        policy: { windowMs: p.windowMs, minimumCalls: p.minimumCalls, failureThreshold: p.failureThreshold, failureRateThreshold: p.failureRateThreshold, slowCallMs: p.slowCallMs, slowCallRateThreshold: p.slowCallRateThreshold, openMs: p.openMs },
      },
      pacing: {
        buckets: paceUse(effectiveLimits(dep, observedLimits(observed)), paceState, now, (dep.rateLimit?.burstSeconds ?? 1) * 1000),
        notBefore: notBeforeMs !== undefined && notBeforeMs > now ? notBeforeMs : null,
      },
      retryBudget: retryBudgetUse(retryHash, now, dep.retry),
    };
  }
}
