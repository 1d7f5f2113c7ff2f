import { randomBytes } from 'node:crypto';
import type { RedisKeys } from '../redis/keys.js';
import type { LuaScripts } from '../redis/scripts.js';
import type { FairShare, PermitScope } from './permit-scopes.js';

/** Permits held at several scopes under one token, which only their holder knows. */
export interface PermitLease {
  readonly token: string;
  /** Scope names, in acquisition order. */
  readonly scopes: readonly string[];
  /** The scopes' zsets, in the same order. */
  readonly keys: readonly string[];
  /** Redis-clock ms at which the lease lapses unless renewed; a successful renew() moves it. */
  expiresAt: number;
}

export type AcquireResult = { granted: true; lease: PermitLease } | { granted: false; blockedBy: string; count: number; limit: number };

/**
 * The thin Redis side of concurrency caps: each call is one EVALSHA of one permit script in `lua/`.
 * All permit keys share one hash tag, so a call's scopes and the limits hash are in one slot.
 */
export class PermitStore {
  constructor(
    private readonly scripts: LuaScripts,
    private readonly keys: RedisKeys,
  ) {}

  /**
   * Takes a permit at every scope or at none. `owner` (e.g. `<runId>:<attempt>`) starts the token so
   * holders can be told apart in Redis; the random rest makes each acquisition's token its own, so
   * a stale holder can never renew or release a newer acquisition by the same owner.
   */
  async tryAcquire(scopes: readonly PermitScope[], ttlMs: number, owner: string): Promise<AcquireResult> {
    if (scopes.length === 0) throw new RangeError('an acquisition needs at least one scope');
    checkTtl(ttlMs);
    const token = `${owner}:${randomBytes(8).toString('hex')}`;
    const keys = scopes.map((s) => s.key);
    const extraKeys: string[] = [];
    // Adaptive figures and the waiting set are keys after the limits hash; index 0 says none.
    const extraKey = (key: string) => keys.length + 1 + extraKeys.push(key);
    const figureIndex = (s: PermitScope) => (s.adaptive ? extraKey(s.adaptive.key) : 0);
    const sharedIndex = (s: PermitScope) => (s.fairShare ? sharedScopeIndex(scopes, s) : 0);
    const args = scopes.flatMap((s) => [s.limitField, s.defaultLimit, s.share, figureIndex(s), s.adaptive?.max ?? 0, sharedIndex(s)]);
    const fair = fairShareOf(scopes);
    const waiting = fair ? [extraKey(fair.waitingKey), fair.tenant, owner, fair.claimMs] : [0, '', '', 0];
    if (fair) extraKeys.push(fair.waitingCallsKey);
    const res = (await this.scripts.run('permitsAcquire', [...keys, this.keys.permitLimits(), ...extraKeys], [token, ttlMs, ...waiting, ...args])) as [1, number] | [0, number, number, number];
    if (res[0] === 1) return { granted: true, lease: { token, scopes: scopes.map((s) => s.name), keys, expiresAt: Number(res[1]) } };
    return { granted: false, blockedBy: scopes[res[1] - 1]!.name, count: Number(res[2]), limit: Number(res[3]) };
  }

  /** False when the lease was lost (it lapsed): the holder no longer has the permits and must stop. */
  async renew(lease: PermitLease, ttlMs: number): Promise<boolean> {
    checkTtl(ttlMs);
    const expiresAt = Number(await this.scripts.run('permitsRenew', lease.keys, [lease.token, ttlMs]));
    if (expiresAt === 0) return false;
    lease.expiresAt = expiresAt;
    return true;
  }

  /** How many of the lease's scopes still held it (0 once it lapsed or was released). */
  async release(lease: PermitLease): Promise<number> {
    return Number(await this.scripts.run('permitsRelease', lease.keys, [lease.token, this.keys.permitReleased(), ...lease.scopes]));
  }
}

/** The one fair share of an acquisition, if any: the script keeps one waiting set per acquisition. */
function fairShareOf(scopes: readonly PermitScope[]): FairShare | undefined {
  const fair = scopes.filter((s) => s.fairShare);
  if (fair.length > 1) throw new RangeError('an acquisition takes at most one fair share');
  return fair[0]?.fairShare;
}

/** The 1-based index of the scope a fair share divides, which must come before it. */
function sharedScopeIndex(scopes: readonly PermitScope[], scope: PermitScope): number {
  const index = scopes.findIndex((s) => s.name === scope.fairShare!.of);
  if (index < 0 || index >= scopes.indexOf(scope)) throw new RangeError(`a fair share of ${scope.fairShare!.of} needs that scope before it`);
  return index + 1;
}

function checkTtl(ttlMs: number): void {
  if (!Number.isInteger(ttlMs) || ttlMs <= 0) throw new RangeError(`a lease TTL must be a positive integer of ms, got ${ttlMs}`);
}
