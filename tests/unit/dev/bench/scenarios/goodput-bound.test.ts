import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { goodputBound, providerLimitSpans, type BoundRequest, type LimitSpan } from '../../../../../src/dev/bench/scenarios/goodput-bound.js';
import { parseScenario } from '../../../../../src/dev/bench/scenarios/scenario.js';
import { RateBucket } from '../../../../../src/dev/sim/rate-limit.js';

const MINUTE = 60_000;
const perMinute = (rpm: number, fromMs = 0, toMs = 10 * MINUTE): LimitSpan => ({ fromMs, toMs, requestsPerMinute: rpm });
const req = (dueSec: number, deadlineSec: number, calls = 2): BoundRequest => ({ dueMs: dueSec * 1000, deadlineMs: (dueSec + deadlineSec) * 1000, calls });

/**
 * A real schedule against the simulator's own bucket: earliest deadline first, a request served as
 * soon as the bucket covers all its calls, dropped once its deadline passes. What it serves is
 * feasible, so no upper bound may be below it.
 */
function greedyEdf(requests: readonly BoundRequest[], rpm: number): number {
  // Its calls go at once, so a request needing more than the bucket holds is never served here.
  const arrivals = requests.filter((r) => r.calls <= rpm).sort((a, b) => a.dueMs - b.dueMs);
  const bucket = new RateBucket(rpm, MINUTE, 0);
  const pending: BoundRequest[] = [];
  let next = 0;
  let served = 0;
  let t = 0;
  for (;;) {
    while (next < arrivals.length && arrivals[next]!.dueMs <= t) pending.push(arrivals[next++]!);
    pending.sort((a, b) => a.deadlineMs - b.deadlineMs);
    while (pending.length > 0 && pending[0]!.deadlineMs < t) pending.shift();
    while (pending.length > 0 && (bucket.covers(pending[0]!.calls, t) || bucket.waitMs(pending[0]!.calls, t) === 0)) {
      bucket.take(pending.shift()!.calls, t);
      served++;
    }
    const ready = pending.length > 0 ? t + bucket.waitMs(pending[0]!.calls, t) : Number.POSITIVE_INFINITY;
    const due = next < arrivals.length ? arrivals[next]!.dueMs : Number.POSITIVE_INFINITY;
    // The head cannot be served before its deadline and nothing arrives before then: it is dropped.
    if (pending.length > 0 && ready > pending[0]!.deadlineMs && due > pending[0]!.deadlineMs) {
      pending.shift();
      continue;
    }
    const at = Math.min(ready, due);
    if (at === Number.POSITIVE_INFINITY) return served;
    t = at;
  }
}

const requestsArb = (calls: fc.Arbitrary<number>) =>
  fc.array(
    fc.record({ dueMs: fc.integer({ min: 0, max: 60_000 }), windowMs: fc.integer({ min: 0, max: 30_000 }), calls }).map((r) => ({ dueMs: r.dueMs, deadlineMs: r.dueMs + r.windowMs, calls: r.calls })),
    { maxLength: 60 },
  );

describe('the goodput bound', () => {
  it('the worked example of docs/scenarios.md: earliest deadline first, an urgent latecomer, and a batch request served late', () => {
    // 6 requests a minute (a full bucket of 6, one more every 10 s), 2 calls per request.
    // At 0 s two interactive requests (2 s) and three batch ones (60 s); at 30 s one more interactive.
    const requests = [req(0, 2), req(0, 2), req(0, 60), req(0, 60), req(0, 60), req(30, 2)];
    // All six fit: X and Y and one batch at 0 s (6 calls), the latecomer at 30 s (3 refilled),
    // the second batch at 40 s, the third at 60 s.
    expect(goodputBound(requests, [perMinute(6)])).toBe(6);
    // Serving the second batch request as soon as it can (20 s) leaves too little for the latecomer.
    expect(greedyEdf(requests, 6)).toBe(5);
    // One more interactive request at 31 s: by 60 s at most 12 calls can be drawn, 14 are asked.
    expect(goodputBound([...requests, req(31, 2)], [perMinute(6)])).toBe(6);
  });

  it('counts a full bucket only once: a rested provider stores no more than its capacity', () => {
    // 60 a minute: one call a second and 60 at most at once. A request of 2 calls every second for
    // a minute draws what refills; 40 more at 60 s find a full bucket, 60 calls: 30 of them fit.
    const steady = Array.from({ length: 60 }, (_, i) => req(i, 1.5));
    const burst = Array.from({ length: 40 }, () => req(60, 0));
    expect(goodputBound(burst, [perMinute(60)])).toBe(30);
    // The steady minute needs 120 calls against 60 + 60 refilled: at least some are lost, and the
    // burst still meets at most a full bucket.
    expect(goodputBound([...steady, ...burst], [perMinute(60)])).toBeLessThanOrEqual(60 + 30);
  });

  it('serves requests that need no call, or whose window reaches beyond the limited span, and none whose deadline came before it was sent', () => {
    const span = perMinute(1, 10_000, 20_000);
    // Free: the first (before the span), the second (no call), the third (its window ends after the
    // span). The two 1-call requests at 15 s meet one call in the bucket; the last is already late.
    expect(goodputBound([req(0, 1), req(12, 1, 0), req(15, 10), req(15, 1, 1), req(15, 1, 1), { dueMs: 5, deadlineMs: 4, calls: 0 }], [span])).toBe(4);
  });

  it('gives up the request needing most calls when the calls asked exceed what can be drawn', () => {
    expect(goodputBound([req(0, 0, 3), req(0, 0, 1), req(0, 0, 1)], [perMinute(4)])).toBe(2);
  });

  it('is at most the requests, and all of them without a limit', () => {
    fc.assert(
      fc.property(requestsArb(fc.integer({ min: 0, max: 4 })), fc.integer({ min: 1, max: 120 }), (requests, rpm) => {
        expect(goodputBound(requests, [perMinute(rpm)])).toBeLessThanOrEqual(requests.length);
        expect(goodputBound(requests, [])).toBe(requests.length);
      }),
    );
  });

  it('is never below what a real schedule against the simulator\'s bucket serves', () => {
    fc.assert(
      fc.property(requestsArb(fc.integer({ min: 1, max: 4 })), fc.integer({ min: 1, max: 120 }), (requests, rpm) => {
        expect(goodputBound(requests, [perMinute(rpm)])).toBeGreaterThanOrEqual(greedyEdf(requests, rpm));
      }),
    );
  });

  it('never falls with more capacity or longer deadlines', () => {
    fc.assert(
      fc.property(requestsArb(fc.integer({ min: 0, max: 4 })), fc.integer({ min: 1, max: 120 }), fc.integer({ min: 0, max: 60 }), fc.integer({ min: 0, max: 10_000 }), (requests, rpm, more, longerMs) => {
        const bound = goodputBound(requests, [perMinute(rpm)]);
        expect(goodputBound(requests, [perMinute(rpm + more)])).toBeGreaterThanOrEqual(bound);
        expect(goodputBound(requests.map((r) => ({ ...r, deadlineMs: r.deadlineMs + longerMs })), [perMinute(rpm)])).toBeGreaterThanOrEqual(bound);
      }),
    );
  });

  it('reads the provider\'s request limits over time from the fault timeline, scaled, merging unchanged neighbours', () => {
    const scenario = parseScenario(
      {
        name: 'unit',
        description: 'unit',
        durationSec: 100,
        deadlineSec: { interactive: 2, batch: 60 },
        arrivals: [{ tenant: 'tenant-a', workflow: 'support-reply', class: 'interactive', pattern: { kind: 'constant', rate: 1 } }],
        clientRetry: { kind: 'none' },
        faults: [
          { atSec: 0, forSec: 20, target: 'anthropic', fault: { rateLimit: { requestsPerMinute: 600 } } },
          { atSec: 20, forSec: 20, target: 'anthropic', fault: { rateLimit: { requestsPerMinute: 600 } } },
          { atSec: 30, forSec: 20, target: 'anthropic', fault: { latencyMs: 500 } },
          { atSec: 60, forSec: 10, target: 'anthropic', fault: { rateLimit: { requestsPerMinute: 5, inputTokensPerMinute: 1000 } } },
          { atSec: 70, forSec: 10, target: 'anthropic', fault: { rateLimit: { outputTokensPerMinute: 1000 } } },
          { atSec: 80, forSec: 10, target: 'report', fault: { rateLimit: { requestsPerMinute: 1 } } },
        ],
        targets: {},
      },
      'unit.json',
    );
    expect(providerLimitSpans(scenario.faults, 2)).toEqual([
      { fromMs: 0, toMs: 20_000, requestsPerMinute: 600 },
      { fromMs: 30_000, toMs: 35_000, requestsPerMinute: 5 },
    ]);
  });
});
