import { rampUpMs } from '../config/ramp-up.js';
import type { DependencyConfig } from '../config/schema.js';
import type { RedisKeys } from '../redis/keys.js';
import type { LuaScripts } from '../redis/scripts.js';
import type { BreakerForce, ForceMode } from './breaker-gate.js';

export type BreakerPolicy = DependencyConfig['breaker'];
export type BreakerStateName = 'closed' | 'open' | 'half_open';
/** `released`: we abandoned the call (e.g. our own deadline), so it says nothing about the dependency. */
export type BreakerOutcome = 'success' | 'failure' | 'released';

/** Whether a call may go out; a probe must report its outcome with the same token. */
export type BreakerAdmission = { allowed: true; probe: boolean } | { allowed: false; state: 'open' | 'half_open'; retryAt: number };

/** One announced transition, as published by the breaker scripts (times are Redis-clock ms). */
export interface BreakerTransition {
  dependency: string;
  from: BreakerStateName;
  to: BreakerStateName;
  at: number;
  /** When the breaker lets its first probe through; set exactly when it opened. */
  retryAt: number | null;
}

const STATES: readonly string[] = ['closed', 'open', 'half_open'] satisfies BreakerStateName[];
const isState = (v: unknown): v is BreakerStateName => typeof v === 'string' && STATES.includes(v);
const isMs = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;

/** The fields of an announcement on a breaker's channel, or undefined when it is no JSON object. */
function announcedFields(text: string): Record<string, unknown> | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined;
}

/** A transition payload, or undefined when it is not one (another writer, a newer format, garbage). */
export function parseBreakerTransition(text: string): BreakerTransition | undefined {
  const fields = announcedFields(text);
  if (!fields) return undefined;
  const { dependency, from, to, at, retryAt } = fields;
  if (typeof dependency !== 'string' || dependency === '' || !isState(from) || !isState(to) || from === to || !isMs(at)) return undefined;
  if (to === 'open' && isMs(retryAt)) return { dependency, from, to, at, retryAt };
  if (to !== 'open' && retryAt === null) return { dependency, from, to, at, retryAt };
  return undefined;
}

/** An operator's force as announced by breaker-force.lua: set (`forced` and `until`) or cleared (both null). */
export interface BreakerForceChange {
  dependency: string;
  forced: ForceMode | null;
  until: number | null;
  at: number;
}

/** A force payload, or undefined when it is not one (a transition, a newer format, garbage). */
export function parseBreakerForceChange(text: string): BreakerForceChange | undefined {
  const fields = announcedFields(text);
  if (!fields) return undefined;
  const { dependency, forced, until, at } = fields;
  if (typeof dependency !== 'string' || dependency === '' || !isMs(at)) return undefined;
  if ((forced === 'open' || forced === 'closed') && isMs(until)) return { dependency, forced, until, at };
  if (forced === null && until === null) return { dependency, forced, until, at };
  return undefined;
}

/**
 * The longest a force may last: a drill is minutes, and one forgotten must not keep a dependency
 * open (or its failures unchecked) for long. Every force needs its own duration, up to this.
 */
export const MAX_FORCE_MS = 3_600_000;

/**
 * How long an idle breaker's keys outlive their last write: well past any lease, window, open
 * period or ramp-up still running, so only a breaker nobody has used for that long leaves nothing
 * behind (and a closed one's closedAt lasts its whole ramp-up).
 */
function keepMs(policy: BreakerPolicy): number {
  return 2 * Math.max(policy.openMs, policy.probeLeaseMs, policy.windowMs, policy.rampUp ? rampUpMs(policy.rampUp) : 0);
}

/**
 * The thin Redis side of the shared circuit breakers: each call is one EVALSHA of a breaker script
 * in `lua/`. A dependency's keys share its hash tag, so each call touches one cluster slot.
 */
export class BreakerStore {
  constructor(
    private readonly scripts: LuaScripts,
    private readonly keys: RedisKeys,
    private readonly policyOf: (dependency: string) => BreakerPolicy | undefined,
  ) {}

  /** `token` identifies the call (unique per call): a probe's outcome only counts under it. */
  async admit(dependency: string, token: string): Promise<BreakerAdmission> {
    if (token === '') throw new RangeError('a breaker admission needs a token');
    const policy = this.policy(dependency);
    const res = (await this.scripts.run(
      'breakerAdmit',
      [this.keys.breaker(dependency), this.keys.breakerProbes(dependency), this.keys.breakerForced(dependency)],
      [token, policy.halfOpenProbes, policy.probeLeaseMs, keepMs(policy), this.keys.breakerChanged(dependency), dependency],
    )) as [1, 0 | 1] | [0, 'open' | 'half_open', number];
    if (res[0] === 1) return { allowed: true, probe: res[1] === 1 };
    return { allowed: false, state: res[1], retryAt: Number(res[2]) };
  }

  /** `token`: the one the call was admitted with; only a probe's outcome counts while half-open. */
  async record(dependency: string, token: string | undefined, outcome: BreakerOutcome, durationMs: number): Promise<{ state: BreakerStateName; changed: boolean }> {
    if (!Number.isFinite(durationMs)) throw new RangeError(`a call's duration must be a number of ms, got ${durationMs}`);
    const p = this.policy(dependency);
    const [state, changed] = (await this.scripts.run(
      'breakerRecord',
      [this.keys.breaker(dependency), this.keys.breakerWindow(dependency), this.keys.breakerProbes(dependency), this.keys.breakerForced(dependency)],
      [
        token ?? '',
        outcome,
        // A negative duration is a wall clock stepped back mid-call; the outcome still counts.
        Math.max(0, durationMs),
        p.windowMs,
        p.minimumCalls,
        p.failureThreshold,
        p.failureRateThreshold,
        p.slowCallMs,
        p.slowCallRateThreshold,
        p.openMs,
        p.halfOpenSuccesses,
        keepMs(p),
        this.keys.breakerChanged(dependency),
        dependency,
      ],
    )) as [BreakerStateName, 0 | 1];
    return { state, changed: changed === 1 };
  }

  /**
   * Adds `calls` that succeeded promptly outside any probe, counted by this instance while the
   * breaker was closed, to its window; resolves to whether they counted (the breaker was closed).
   */
  async tally(dependency: string, calls: number): Promise<boolean> {
    if (!Number.isInteger(calls) || calls <= 0) throw new RangeError(`a tally is a positive number of calls, got ${calls}`);
    const counted = await this.scripts.run('breakerTally', [this.keys.breaker(dependency), this.keys.breakerWindow(dependency), this.keys.breakerForced(dependency)], [calls, this.policy(dependency).windowMs]);
    return counted === 1;
  }

  /**
   * Forces the dependency's breaker open or closed for `durationMs` (1 ms to MAX_FORCE_MS), replacing
   * any force in place, and announces it; resolves to the force now in place (Redis-clock `until`).
   */
  async force(dependency: string, mode: ForceMode, durationMs: number): Promise<BreakerForce> {
    this.policy(dependency);
    if (!Number.isInteger(durationMs) || durationMs < 1 || durationMs > MAX_FORCE_MS) throw new RangeError(`a force lasts 1 to ${MAX_FORCE_MS} ms, got ${durationMs}`);
    const [, until] = (await this.scripts.run('breakerForce', [this.keys.breakerForced(dependency)], [mode, durationMs, this.keys.breakerChanged(dependency), dependency])) as [ForceMode, number, 1];
    return { mode, until: Number(until) };
  }

  /** Ends the dependency's force, if any, and announces it; resolves to whether there was one. */
  async clearForce(dependency: string): Promise<boolean> {
    this.policy(dependency);
    const [, , changed] = (await this.scripts.run('breakerForce', [this.keys.breakerForced(dependency)], ['none', 0, this.keys.breakerChanged(dependency), dependency])) as ['none', 0, 0 | 1];
    return changed === 1;
  }

  private policy(dependency: string): BreakerPolicy {
    const policy = this.policyOf(dependency);
    if (!policy) throw new Error(`no breaker policy for dependency "${dependency}"`);
    return policy;
  }
}
