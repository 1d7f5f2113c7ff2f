/**
 * An upper bound on the requests of a scenario that any system could answer within their
 * deadlines, given only the provider's request rate limits (the `rateLimit` windows on anthropic)
 * and each workflow's LLM calls: what on-time goodput is judged against. Pure.
 *
 * The bound relaxes everything but the provider's request buckets: calls take no time, a request's
 * calls may all go at once, nothing else (tools, CPU, Kafka, tokens) limits, and client retries are
 * ignored. Every relaxation only lets more requests through, so what it counts is an upper bound;
 * docs/scenarios.md ("Figures") gives the definition with a worked example.
 */
import { ANTHROPIC_TARGET } from '../../sim/fault-profile.js';
import { MINUTE_MS } from '../../sim/rate-limit.js';
import { faultAt } from './arrivals.js';
import { faultChangesMs } from './provider-timeline.js';
import type { FaultWindow } from './scenario.js';

/** One logical request: when its first send was due, when its deadline passes (both ms from the start), and the provider calls it needs. */
export interface BoundRequest {
  dueMs: number;
  deadlineMs: number;
  calls: number;
}

/**
 * A stretch of the run (ms from the start, scaled; `toMs` exclusive) in which the provider takes at
 * most `requestsPerMinute`: a continuously refilled bucket of that many calls, full at the span's
 * start (src/dev/sim/rate-limit.ts). Its token limits are left out, which only loosens the bound.
 */
export interface LimitSpan {
  fromMs: number;
  toMs: number;
  requestsPerMinute: number;
}

/**
 * Where the fault timeline limits the provider's requests, in time order; elsewhere it is
 * unlimited. Adjacent stretches with the same limits are one span, as the simulator keeps a
 * bucket whose limit did not change.
 */
export function providerLimitSpans(timeline: readonly FaultWindow[], timeScale: number): LimitSpan[] {
  const changes = faultChangesMs(
    timeline.filter((w) => w.target === ANTHROPIC_TARGET),
    timeScale,
  );
  const spans: LimitSpan[] = [];
  for (let i = 0; i + 1 < changes.length; i++) {
    const [fromMs, toMs] = [changes[i]!, changes[i + 1]!];
    // A hair past the instant, as the harness applies it: a window holds from its start.
    const requestsPerMinute = faultAt(timeline, fromMs + 0.001, timeScale).get(ANTHROPIC_TARGET)?.rateLimit?.requestsPerMinute;
    if (requestsPerMinute === undefined) continue;
    const last = spans[spans.length - 1];
    if (last !== undefined && last.toMs === fromMs && last.requestsPerMinute === requestsPerMinute) last.toMs = toMs;
    else spans.push({ fromMs, toMs, requestsPerMinute });
  }
  return spans;
}

/**
 * The most calls any schedule can have drawn from the span's bucket by each of `times` (ascending),
 * for `requests` alone: for every instant s ≤ t, the calls arrived by s (none can be drawn before
 * its request is sent) plus a full bucket at s plus the refill from s to t. The least over s is
 * what a client that sends every call as soon as it can would have drawn: a bucket at its capacity
 * refills nothing, so calls not asked for while it is full are lost to every schedule alike.
 */
function drawableBy(requests: readonly BoundRequest[], requestsPerMinute: number, times: readonly number[]): number[] {
  const arrivals = [...requests].sort((a, b) => a.dueMs - b.dueMs);
  const refillPerMs = requestsPerMinute / MINUTE_MS;
  // The least, over the instants just before each arrival so far, of the calls arrived less the refill by then.
  let least = Number.POSITIVE_INFINITY;
  let arrived = 0;
  let next = 0;
  return times.map((t) => {
    for (; next < arrivals.length && arrivals[next]!.dueMs <= t; next++) {
      least = Math.min(least, arrived - refillPerMs * arrivals[next]!.dueMs);
      arrived += arrivals[next]!.calls;
    }
    return requestsPerMinute + refillPerMs * t + Math.min(least, arrived - refillPerMs * t);
  });
}

/** Float slack of the supply curve: a few ulps of the call counts it adds, far below one call. */
const EPSILON = 1e-9;

/**
 * The most requests of one span that can all draw their calls by their deadlines, the calls of
 * each going at its deadline (latest is never worse once the supply curve is fixed). Moore and
 * Hodgson's rule, exact for a nondecreasing supply: take requests in deadline order, and when the
 * calls taken exceed what can be drawn by the current deadline, give up the request needing most.
 */
function servedWithin(requests: readonly BoundRequest[], requestsPerMinute: number): number {
  const byDeadline = [...requests].sort((a, b) => a.deadlineMs - b.deadlineMs);
  const supply = drawableBy(requests, requestsPerMinute, byDeadline.map((r) => r.deadlineMs));
  // Requests taken by their calls: few distinct counts, so a map stands in for a heap.
  const taken = new Map<number, number>();
  let calls = 0;
  let served = 0;
  byDeadline.forEach((r, i) => {
    taken.set(r.calls, (taken.get(r.calls) ?? 0) + 1);
    calls += r.calls;
    served++;
    if (calls > supply[i]! + EPSILON) {
      const most = Math.max(...taken.keys());
      const left = taken.get(most)! - 1;
      if (left === 0) taken.delete(most);
      else taken.set(most, left);
      calls -= most;
      served--;
    }
  });
  return served;
}

/**
 * The bound: requests that need no call, and those whose window (due to deadline) reaches outside
 * one limited span (an unlimited stretch, or a second span), count as answered on time; the others
 * are bounded span by span.
 */
export function goodputBound(requests: readonly BoundRequest[], spans: readonly LimitSpan[]): number {
  const within = new Map<LimitSpan, BoundRequest[]>();
  let free = 0;
  for (const r of requests) {
    if (r.deadlineMs < r.dueMs) continue;
    const span = r.calls === 0 ? undefined : spans.find((s) => s.fromMs <= r.dueMs && r.deadlineMs < s.toMs);
    if (span === undefined) free++;
    else if (within.has(span)) within.get(span)!.push(r);
    else within.set(span, [r]);
  }
  let bounded = 0;
  for (const [span, rs] of within) bounded += servedWithin(rs, span.requestsPerMinute);
  return free + bounded;
}
