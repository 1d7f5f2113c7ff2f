import type { RunClass } from '../events/schemas.js';

export type ForceMode = 'open' | 'closed';

/** An operator's override of a breaker for a drill, in force until `until` (Redis-clock ms). */
export interface BreakerForce {
  mode: ForceMode;
  until: number;
}

/** One dependency's breaker as an instance last saw it (pub/sub or the periodic read). */
export interface BreakerView {
  name: string;
  state: 'closed' | 'open' | 'half_open';
  /** While open: when the next probe may go out (ms since epoch). */
  retryAt?: number;
  /** While closed after a trip: when it closed (Redis-clock ms), the start of its ramp-up. */
  closedAt?: number;
  /** An operator's force, if one was set; it decides over `state` until it ends. */
  forced?: BreakerForce;
}

/**
 * The breaker as calls meet it at `now`: a force in place decides (forced open is open until the
 * force ends, so runs wait for that; forced closed is closed with no ramp-up, whatever the window
 * says), and `forced` is kept to say why. A force past its end is dropped: the key expired in
 * Redis even if no read has shown it yet.
 */
export function effectiveView(view: BreakerView, now: number): BreakerView {
  const { forced, ...shared } = view;
  if (!forced || forced.until <= now) return shared;
  return forced.mode === 'open' ? { name: view.name, state: 'open', retryAt: forced.until, forced } : { name: view.name, state: 'closed', forced };
}

/**
 * What a processor does with a run (or one step of it) given the breakers it needs:
 * - `go`: every needed dependency is closed, or may be probed now;
 * - `wait`: a needed dependency is open and the run can wait for its next probe within its deadline
 *   (batch always waits: it expires if the deadline passes first);
 * - `unavailable`: an interactive run that cannot wait for the next probe gets its tenant's
 *   fallback at once: a quick honest answer beats a spinner.
 */
export type BreakerGate = { kind: 'go' } | { kind: 'wait'; dependency: string; until: number } | { kind: 'unavailable'; dependency: string; until: number };

/**
 * Where the half-open probes of a dependency are in this instance: `probeRoom` says whether another
 * run needing it may start now. Probing runs are bounded locally as well as in Redis so a backlog
 * does not stampede into a half-open breaker only to be refused there.
 */
export interface GateInput {
  runClass: RunClass;
  deadline: number;
  needed: readonly string[];
  views: ReadonlyMap<string, BreakerView>;
  now: number;
  /** The least time a call needs to be worth starting; waiting that would leave less is pointless. */
  minCallMs: number;
  probeRoom: (dependency: string) => boolean;
  /**
   * Whether a closed dependency still ramps up after its close (`breaker.rampUp`): then runs
   * needing it are counted as probing runs are, and `probeRoom` says whether its ramped cap has
   * room for one more, so held runs released on the close do not all start at once.
   */
  rampingUp?: (dependency: string) => boolean;
}

/** The moment a needed dependency may next be called, or undefined when it may be called now. */
function blockedUntil(view: BreakerView | undefined, now: number, probeRoom: (d: string) => boolean, rampingUp: (d: string) => boolean): number | undefined {
  if (!view) return undefined;
  if (view.state === 'closed') return rampingUp(view.name) && !probeRoom(view.name) ? now : undefined;
  if (view.state === 'open' && view.retryAt !== undefined && view.retryAt > now) return view.retryAt;
  // Due for probing (half-open, or open past its retryAt): only as many runs as there are probes.
  return probeRoom(view.name) ? undefined : now;
}

export function gateRun(input: GateInput): BreakerGate {
  const { now } = input;
  let worst: { dependency: string; until: number } | undefined;
  for (const name of input.needed) {
    const until = blockedUntil(input.views.get(name), now, input.probeRoom, input.rampingUp ?? (() => false));
    if (until !== undefined && (!worst || until > worst.until)) worst = { dependency: name, until };
  }
  if (!worst) return { kind: 'go' };
  const canWait = input.runClass === 'batch' || worst.until + input.minCallMs <= input.deadline;
  return canWait ? { kind: 'wait', ...worst } : { kind: 'unavailable', ...worst };
}

/** `sluice_breaker_state` encodes the state as a number so it can be graphed and alerted on. */
export const BREAKER_STATE_VALUE = { closed: 0, half_open: 1, open: 2 } as const;
