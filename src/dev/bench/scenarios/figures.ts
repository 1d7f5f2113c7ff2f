/**
 * A scenario run's figures, computed from what the harness recorded: every send with its times
 * (traffic.ts) and the simulator's counters once a second (provider-timeline.ts). Pure, so each
 * definition below is unit-tested; docs/scenarios.md gives them in words.
 */
import type { CpuShares } from '../cpu-time.js';
import { latencySummary, type LatencySummary } from '../latency-summary.js';
import type { ScheduledSend } from './arrivals.js';
import type { TimelineSecond } from './chart.js';
import { goodputBound, providerLimitSpans } from './goodput-bound.js';
import type { ProviderSample } from './provider-timeline.js';
import type { Scenario } from './scenario.js';
import type { SendRecord } from './traffic.js';

export interface SystemFigures {
  /** Sends made, client retries included. */
  offered: number;
  /** Logical requests: first sends. */
  requests: number;
  /** Sends the client could not make (too many waiting for an answer). */
  dropped: number;
  /** Answers by kind: `accepted`, `429 rate_limited`, `503 overloaded`, `transport`, … */
  answers: Record<string, number>;
  /** Terminal statuses of accepted runs; `none` for runs that never ended. */
  terminal: Record<string, number>;
  /** Requests whose last send ended in a completed run (degraded answers included). */
  completedRequests: number;
  /** Requests whose last send did not end in a completed run. */
  gaveUp: number;
  /**
   * The goodput: requests answered by a completed run whose result is not marked degraded, within
   * their class's deadline counted from the request's first send (client retries included).
   */
  onTimeGoodput: number;
  /** Requests answered by a completed run whose result is marked degraded: a stand-in, on time or not. */
  completedDegraded: number;
  /** The most requests any system could answer on time under the provider's request limits (goodput-bound.ts). */
  goodputBound: number;
  /** Per tenant: its requests, those answered on time (as onTimeGoodput), their share, and its send → answer p99. */
  tenants: Record<string, TenantFigures>;
  /** Send to answer (a refusal, or the run's terminal status), and send to the run's first status event. */
  latency: Record<'interactive' | 'batch', { toAnswer: LatencySummary; toFirstEvent: LatencySummary }>;
  /** Send to the HTTP answer of every send: how fast the API answers, whatever it answers. */
  httpAnswer: LatencySummary;
  /** Send to answer per tenant, p99. */
  tenantP99Ms: Record<string, number>;
  /** Send to answer of the tenants no noisy stream belongs to, p99; null when the scenario marks no stream noisy. */
  quietTenantsP99Ms: number | null;
  interactiveP99Ms: number;
  answerP99Ms: number;
  providerCalls: number;
  /** LLM calls the offered sends would make if every call succeeded once. */
  offeredCalls: number;
  providerCallsPerOffered: number;
  /** The same over the fault windows only: calls made in them over calls offered by sends due in them. */
  providerCallsPerOfferedDuringFault: number | null;
  /**
   * Provider calls that went into no completed real answer: the simulator's count less the LLM calls
   * of the completed runs not marked degraded (their workflow's calls per run), at least 0.
   */
  wastedProviderCalls: number;
  /** wastedProviderCalls over providerCalls; null without calls. */
  wastedShare: number | null;
  /** The provider's rate-limit 429s (injected faults not counted), and their share of providerCalls (null without calls). */
  provider429s: number;
  provider429Share: number | null;
  /** LLM calls per tenant over the run, 429s included as in providerCalls. */
  providerCallsByTenant: Record<string, number>;
  /**
   * With two tenants weighted (the scenario's tenantWeights): |their calls' ratio ÷ their weights'
   * ratio − 1| over the calls made while both were sending; null otherwise, or when one made none.
   */
  weightedShareError: number | null;
  backlogPeak: number;
  backlogBound: number | null;
  drainSec: number | null;
  peakAfterRatio: number | null;
  lost: number;
  duplicates: number;
  /** Where the machine's CPU went while the scenario sent (not while runs were followed after); null when not measured. */
  cpuWhileSending: CpuShares | null;
}

export interface TenantFigures {
  requests: number;
  completedOnTime: number;
  onTimeShare: number;
  p99Ms: number;
}

export interface FigureInputs {
  scenario: Scenario;
  timeScale: number;
  sends: readonly SendRecord[];
  /** The first sends as scheduled (dropped ones included): the arrivals the goodput bound is computed from. */
  schedule: readonly ScheduledSend[];
  dropped: number;
  samples: readonly ProviderSample[];
  llmCallsPerRun: Readonly<Record<string, number>>;
  backlogBound: number | null;
  /** When the harness stopped following runs, ms from the start. */
  endMs: number;
  cpu?: CpuShares;
}

/** A stretch of the run, ms from the start (scaled). */
export interface Span {
  fromMs: number;
  toMs: number;
}

const SECOND_MS = 1_000;
/** Resolution of the backlog series the drain time is read from. */
const BACKLOG_STEP_MS = 100;

/** When a send was answered: its run's terminal status if accepted (never, if the run never ended), else its HTTP answer. */
export function answerMs(s: SendRecord): number | undefined {
  return s.outcome?.kind === 'accepted' ? s.terminalMs : s.answeredMs;
}

/** Send to answer; a send still unanswered at `endMs` counts as waiting until then, so a lost run is never hidden. */
export function latencyMs(s: SendRecord, endMs: number): number {
  return (answerMs(s) ?? endMs) - s.dueMs;
}

/** Where the scenario disturbs the system: its fault windows, else its spikes; none for steady load. */
export function disturbance(scenario: Scenario, timeScale: number): Span | undefined {
  const spans =
    scenario.faults.length > 0
      ? scenario.faults.map((f) => ({ from: f.atSec, to: f.atSec + f.forSec }))
      : scenario.arrivals.flatMap((a) => (a.pattern.kind === 'spike' ? [{ from: a.pattern.atSec, to: a.pattern.atSec + a.pattern.forSec }] : []));
  if (spans.length === 0) return undefined;
  return { fromMs: (Math.min(...spans.map((s) => s.from)) * SECOND_MS) / timeScale, toMs: (Math.max(...spans.map((s) => s.to)) * SECOND_MS) / timeScale };
}

/**
 * The backlog after each change, in time order: +1 at a 202, −1 at its run's terminal status (a
 * terminal status seen before its 202 counts at the 202). At one instant arrivals count first.
 */
function backlogSteps(sends: readonly SendRecord[]): { times: number[]; levels: number[] } {
  const changes: [number, number][] = [];
  for (const s of sends) {
    if (s.outcome?.kind !== 'accepted') continue;
    changes.push([s.answeredMs!, 1]);
    if (s.terminalMs !== undefined) changes.push([Math.max(s.terminalMs, s.answeredMs!), -1]);
  }
  changes.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
  let level = 0;
  return { times: changes.map((c) => c[0]), levels: changes.map(([, d]) => (level += d)) };
}

/** Accepted runs not yet ended at each instant. */
export function backlogAt(sends: readonly SendRecord[]): (ms: number) => number {
  const { times, levels } = backlogSteps(sends);
  return (ms) => {
    // The last change at or before ms.
    let lo = 0;
    let hi = times.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (times[mid]! <= ms) lo = mid + 1;
      else hi = mid;
    }
    return lo === 0 ? 0 : levels[lo - 1]!;
  };
}

export function backlogPeak(sends: readonly SendRecord[]): number {
  // A loop, not Math.max(...levels): a long run has more changes than a call may take arguments.
  return backlogSteps(sends).levels.reduce((peak, level) => Math.max(peak, level), 0);
}

/** The simulator's cumulative count at any instant, linear between its readings (flat before the first and after the last). */
export function cumulativeAt(samples: readonly ProviderSample[], pick: (s: ProviderSample) => number): (ms: number) => number {
  return (ms) => {
    if (samples.length === 0) return 0;
    if (ms <= samples[0]!.atMs) return pick(samples[0]!);
    for (let i = 1; i < samples.length; i++) {
      const a = samples[i - 1]!;
      const b = samples[i]!;
      if (ms <= b.atMs) return b.atMs === a.atMs ? pick(b) : pick(a) + ((pick(b) - pick(a)) * (ms - a.atMs)) / (b.atMs - a.atMs);
    }
    return pick(samples[samples.length - 1]!);
  };
}

/**
 * Seconds from the end of the disturbance until the backlog is back to the most it held before
 * the disturbance began (steady state); without a disturbance, from the last arrival until it is
 * empty. Null if that did not happen before the harness stopped.
 */
export function drainSec(sends: readonly SendRecord[], span: Span | undefined, arrivalsEndMs: number, endMs: number): number | null {
  const backlog = backlogAt(sends);
  let baseline = 0;
  if (span !== undefined) for (let t = 0; t < span.fromMs; t += BACKLOG_STEP_MS) baseline = Math.max(baseline, backlog(t));
  const from = span?.toMs ?? arrivalsEndMs;
  // Past the end nothing changes any more: the backlog there is the last one seen.
  for (let t = from; t <= Math.max(endMs, from); t += BACKLOG_STEP_MS) if (backlog(t) <= baseline) return (t - from) / SECOND_MS;
  return null;
}

/**
 * The most LLM calls made in one second after the faults end, over the mean rate the offered
 * sends of that stretch ask for (their LLM calls per run). Null without faults or arrivals after them.
 */
export function peakAfterRatio(inputs: FigureInputs, arrivalsEndMs: number): number | null {
  if (inputs.scenario.faults.length === 0) return null;
  const faultEndMs = disturbance(inputs.scenario, inputs.timeScale)!.toMs;
  const windowMs = arrivalsEndMs - faultEndMs;
  if (windowMs < SECOND_MS) return null;
  const offered = offeredCalls(inputs.sends.filter((s) => s.dueMs >= faultEndMs && s.dueMs < arrivalsEndMs), inputs.llmCallsPerRun);
  if (offered === 0) return null;
  const calls = cumulativeAt(inputs.samples, (s) => s.llmCalls);
  let peak = 0;
  for (let t = faultEndMs; t + SECOND_MS <= inputs.endMs; t += SECOND_MS) peak = Math.max(peak, calls(t + SECOND_MS) - calls(t));
  return peak / (offered / (windowMs / SECOND_MS));
}

export function offeredCalls(sends: readonly SendRecord[], llmCallsPerRun: Readonly<Record<string, number>>): number {
  return sends.reduce((n, s) => n + (llmCallsPerRun[s.workflow] ?? 0), 0);
}

function answerKey(s: SendRecord): string {
  const o = s.outcome;
  if (o === undefined) return 'unanswered';
  if (o.kind === 'accepted') return 'accepted';
  if (o.kind === 'transport') return 'transport';
  return `${o.status} ${o.code}`;
}

const count = (keys: Iterable<string>): Record<string, number> => {
  const out: Record<string, number> = {};
  for (const k of keys) out[k] = (out[k] ?? 0) + 1;
  return out;
};

/** Each class's deadline in ms: not scaled, like the deadline the clients send. */
function deadlineMs(scenario: Scenario, c: 'interactive' | 'batch'): number {
  return scenario.deadlineSec[c] * SECOND_MS;
}

/** The goodput bound of the scenario's arrivals, deadlines and provider limits (goodput-bound.ts). */
export function scenarioGoodputBound(inputs: Pick<FigureInputs, 'scenario' | 'timeScale' | 'schedule' | 'llmCallsPerRun'>): number {
  const { scenario } = inputs;
  const requests = inputs.schedule.map(({ stream, dueMs }) => {
    const a = scenario.arrivals[stream]!;
    // A workflow whose calls are unknown (an agent's) is taken to need none: the bound stays an upper bound.
    return { dueMs, deadlineMs: dueMs + deadlineMs(scenario, a.class), calls: inputs.llmCallsPerRun[a.workflow] ?? 0 };
  });
  return goodputBound(requests, providerLimitSpans(scenario.faults, inputs.timeScale));
}

/**
 * |ratio of the two weighted tenants' calls ÷ ratio of their weights − 1|, the first named tenant
 * over the second, counted from the later of their first sends to the earlier of their last: while
 * both press on the provider, a fair share by weight is what the figure checks.
 */
export function weightedShareError(inputs: Pick<FigureInputs, 'scenario' | 'schedule' | 'samples'>): number | null {
  const { scenario, schedule } = inputs;
  const weighted = Object.entries(scenario.tenantWeights ?? {}).filter(([t]) => scenario.arrivals.some((a) => a.tenant === t));
  if (weighted.length !== 2) return null;
  const [[a, wa], [b, wb]] = weighted as [[string, number], [string, number]];
  const dues = (t: string) => schedule.filter((s) => scenario.arrivals[s.stream]!.tenant === t).map((s) => s.dueMs);
  const [da, db] = [dues(a), dues(b)];
  if (da.length === 0 || db.length === 0) return null;
  const fromMs = Math.max(da[0]!, db[0]!);
  const toMs = Math.min(da[da.length - 1]!, db[db.length - 1]!);
  const callsOf = (t: string) => {
    const calls = cumulativeAt(inputs.samples, (s) => s.llmCallsByTenant[t] ?? 0);
    return calls(toMs) - calls(fromMs);
  };
  const [ca, cb] = [callsOf(a), callsOf(b)];
  if (!(toMs > fromMs) || ca <= 0 || cb <= 0) return null;
  return Math.abs(ca / cb / (wa / wb) - 1);
}

export function arrivalsEndMs(scenario: Scenario, timeScale: number): number {
  return (scenario.durationSec * SECOND_MS) / timeScale;
}

export function systemFigures(inputs: FigureInputs): SystemFigures {
  const { sends, endMs, scenario, timeScale } = inputs;
  const accepted = sends.filter((s) => s.outcome?.kind === 'accepted');
  const ofClass = (c: 'interactive' | 'batch') => {
    const mine = sends.filter((s) => s.class === c);
    return {
      toAnswer: latencySummary(mine.map((s) => latencyMs(s, endMs))),
      toFirstEvent: latencySummary(mine.flatMap((s) => (s.firstEventMs === undefined ? [] : [s.firstEventMs - s.dueMs]))),
    };
  };
  const lastOfRequest = new Map<number, SendRecord>();
  const firstDueMs = new Map<number, number>();
  for (const s of sends) {
    if ((lastOfRequest.get(s.request)?.attempt ?? 0) < s.attempt) lastOfRequest.set(s.request, s);
    firstDueMs.set(s.request, Math.min(firstDueMs.get(s.request) ?? Number.POSITIVE_INFINITY, s.dueMs));
  }
  const answered = [...lastOfRequest.values()];
  const realAnswer = (s: SendRecord) => s.terminalStatus === 'completed' && s.degraded !== true;
  const onTime = (s: SendRecord) => realAnswer(s) && s.terminalMs! <= firstDueMs.get(s.request)! + deadlineMs(scenario, s.class);
  const latency = { interactive: ofClass('interactive'), batch: ofClass('batch') };
  const httpAnswer = latencySummary(sends.flatMap((s) => (s.answeredMs === undefined ? [] : [s.answeredMs - s.dueMs])));
  const tenants = [...new Set(sends.map((s) => s.tenant))];
  const noisy = new Set(scenario.arrivals.filter((a) => a.noisy === true).map((a) => a.tenant));
  const calls = cumulativeAt(inputs.samples, (s) => s.llmCalls);
  const providerCalls = calls(Number.POSITIVE_INFINITY);
  const offered = offeredCalls(sends, inputs.llmCallsPerRun);
  const faultCalls = scenario.faults.reduce((n, f) => n + calls(((f.atSec + f.forSec) * SECOND_MS) / timeScale) - calls((f.atSec * SECOND_MS) / timeScale), 0);
  const inFault = (s: SendRecord) => scenario.faults.some((f) => s.dueMs >= (f.atSec * SECOND_MS) / timeScale && s.dueMs < ((f.atSec + f.forSec) * SECOND_MS) / timeScale);
  const faultOffered = offeredCalls(sends.filter(inFault), inputs.llmCallsPerRun);
  const end = arrivalsEndMs(scenario, timeScale);
  const last = inputs.samples[inputs.samples.length - 1];
  const tenantP99 = (t: string) => latencySummary(sends.filter((s) => s.tenant === t).map((s) => latencyMs(s, endMs))).p99;
  const tenantFigures = (t: string): TenantFigures => {
    const mine = answered.filter((s) => s.tenant === t);
    const completedOnTime = mine.filter(onTime).length;
    return { requests: mine.length, completedOnTime, onTimeShare: mine.length === 0 ? 0 : completedOnTime / mine.length, p99Ms: tenantP99(t) };
  };
  // Calls that went into a real answer: each completed, not degraded run made its workflow's calls.
  const usefulCalls = offeredCalls(accepted.filter(realAnswer), inputs.llmCallsPerRun);
  const wasted = Math.max(0, providerCalls - usefulCalls);
  const rateLimited = cumulativeAt(inputs.samples, (s) => s.llmRateLimited)(Number.POSITIVE_INFINITY);
  const ofCalls = (n: number) => (providerCalls === 0 ? null : n / providerCalls);
  return {
    offered: sends.length,
    requests: lastOfRequest.size,
    dropped: inputs.dropped,
    answers: count(sends.map(answerKey)),
    terminal: count(accepted.map((s) => s.terminalStatus ?? 'none')),
    completedRequests: answered.filter((s) => s.terminalStatus === 'completed').length,
    gaveUp: answered.filter((s) => s.terminalStatus !== 'completed').length,
    onTimeGoodput: answered.filter(onTime).length,
    completedDegraded: answered.filter((s) => s.terminalStatus === 'completed' && s.degraded === true).length,
    goodputBound: scenarioGoodputBound(inputs),
    tenants: Object.fromEntries(tenants.map((t) => [t, tenantFigures(t)])),
    latency,
    httpAnswer,
    tenantP99Ms: Object.fromEntries(tenants.map((t) => [t, tenantP99(t)])),
    quietTenantsP99Ms: noisy.size === 0 ? null : latencySummary(sends.filter((s) => !noisy.has(s.tenant)).map((s) => latencyMs(s, endMs))).p99,
    interactiveP99Ms: latency.interactive.toAnswer.p99,
    answerP99Ms: httpAnswer.p99,
    providerCalls,
    offeredCalls: offered,
    providerCallsPerOffered: offered === 0 ? 0 : providerCalls / offered,
    providerCallsPerOfferedDuringFault: faultOffered === 0 ? null : faultCalls / faultOffered,
    wastedProviderCalls: wasted,
    wastedShare: ofCalls(wasted),
    provider429s: rateLimited,
    provider429Share: ofCalls(rateLimited),
    providerCallsByTenant: last?.llmCallsByTenant ?? {},
    weightedShareError: weightedShareError(inputs),
    backlogPeak: backlogPeak(sends),
    backlogBound: inputs.backlogBound,
    drainSec: drainSec(sends, disturbance(scenario, timeScale), end, endMs),
    peakAfterRatio: peakAfterRatio(inputs, end),
    lost: accepted.filter((s) => s.terminalMs === undefined).length,
    duplicates: last?.repeatedToolCalls ?? 0,
    cpuWhileSending: inputs.cpu ?? null,
  };
}

/** Per second of the run: what the chart draws. */
export function timeline(inputs: FigureInputs): TimelineSecond[] {
  const { sends, endMs } = inputs;
  const calls = cumulativeAt(inputs.samples, (s) => s.llmCalls);
  const errors = cumulativeAt(inputs.samples, (s) => s.llmErrors);
  const backlog = backlogAt(sends);
  const seconds = Math.ceil(endMs / SECOND_MS);
  const bin = (ms: number | undefined) => (ms === undefined ? -1 : Math.floor(ms / SECOND_MS));
  const out: TimelineSecond[] = [];
  for (let i = 0; i < seconds; i++) {
    const from = i * SECOND_MS;
    const answered = sends.filter((s) => bin(answerMs(s)) === i);
    out.push({
      t: i,
      offered: sends.filter((s) => bin(s.dueMs) === i).length,
      admitted: sends.filter((s) => s.outcome?.kind === 'accepted' && bin(s.answeredMs) === i).length,
      refused: sends.filter((s) => s.outcome !== undefined && s.outcome.kind !== 'accepted' && bin(s.answeredMs) === i).length,
      completed: sends.filter((s) => bin(s.terminalMs) === i).length,
      p99Ms: answered.length === 0 ? null : latencySummary(answered.map((s) => latencyMs(s, endMs))).p99,
      providerCalls: Math.round(calls(from + SECOND_MS) - calls(from)),
      provider429: Math.round(errors(from + SECOND_MS) - errors(from)),
      backlog: backlog(from + SECOND_MS),
    });
  }
  return out;
}
