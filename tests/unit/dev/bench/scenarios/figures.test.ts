import { describe, expect, it } from 'vitest';
import { backlogAt, backlogPeak, cumulativeAt, disturbance, drainSec, latencyMs, scenarioGoodputBound, systemFigures, timeline, weightedShareError, type FigureInputs } from '../../../../../src/dev/bench/scenarios/figures.js';
import type { ProviderSample } from '../../../../../src/dev/bench/scenarios/provider-timeline.js';
import { parseScenario, type Scenario } from '../../../../../src/dev/bench/scenarios/scenario.js';
import type { SendRecord } from '../../../../../src/dev/bench/scenarios/traffic.js';

const scenario = (over: Partial<Record<string, unknown>> = {}): Scenario =>
  parseScenario(
    {
      name: 'unit',
      description: 'unit',
      durationSec: 10,
      deadlineSec: { interactive: 2, batch: 60 },
      arrivals: [{ tenant: 'tenant-a', workflow: 'support-reply', class: 'interactive', pattern: { kind: 'constant', rate: 1 } }],
      clientRetry: { kind: 'none' },
      faults: [{ atSec: 2, forSec: 4, target: 'anthropic', fault: { errorStatus: 429, errorRate: 0.5 } }],
      targets: {},
      ...over,
    },
    'unit.json',
  );

let request = 0;
function accepted(dueMs: number, answeredMs: number, terminalMs?: number, over: Partial<SendRecord> = {}): SendRecord {
  return {
    stream: 0,
    tenant: 'tenant-a',
    workflow: 'support-reply',
    class: 'interactive',
    request: request++,
    attempt: 1,
    dueMs,
    answeredMs,
    outcome: { kind: 'accepted', runId: `r${request}` },
    firstEventMs: terminalMs === undefined ? undefined : answeredMs + 1,
    terminalMs,
    terminalStatus: terminalMs === undefined ? undefined : 'completed',
    ...over,
  };
}

function refused(dueMs: number, answeredMs: number, over: Partial<SendRecord> = {}): SendRecord {
  return { stream: 0, tenant: 'tenant-a', workflow: 'support-reply', class: 'interactive', request: request++, attempt: 1, dueMs, answeredMs, outcome: { kind: 'refused', status: 429, code: 'rate_limited' }, ...over };
}

const sample = (atMs: number, llmCalls: number, llmErrors = 0, repeatedToolCalls = 0, over: Partial<ProviderSample> = {}): ProviderSample => ({
  atMs,
  llmCalls,
  llmErrors,
  llmRateLimited: 0,
  llmCallsByTenant: {},
  toolSideEffects: 0,
  repeatedToolCalls,
  ...over,
});

describe('scenario figures', () => {
  it('measures an accepted send to its terminal status, a refused one to its answer, and an unended one until the end', () => {
    expect(latencyMs(accepted(100, 110, 400), 9_999)).toBe(300);
    expect(latencyMs(refused(100, 105), 9_999)).toBe(5);
    expect(latencyMs(accepted(100, 110), 5_000)).toBe(4_900);
  });

  it('counts the backlog from each 202 to its terminal status, and its exact peak', () => {
    const sends = [accepted(0, 10, 500), accepted(100, 120, 300), accepted(200, 250), refused(300, 301)];
    const at = backlogAt(sends);
    expect([0, 10, 119, 120, 250, 300, 499, 500, 10_000].map(at)).toEqual([0, 1, 1, 2, 3, 2, 2, 1, 1]);
    expect(backlogPeak(sends)).toBe(3);
    // A terminal status seen before its 202 still ends the run at the 202.
    expect(backlogPeak([accepted(0, 50, 40)])).toBe(1);
    expect(backlogAt([accepted(0, 50, 40)])(60)).toBe(0);
  });

  it('finds the disturbance in the fault windows, else the spikes, else none; scaled', () => {
    expect(disturbance(scenario(), 2)).toEqual({ fromMs: 1_000, toMs: 3_000 });
    const spike = scenario({ faults: [], arrivals: [{ tenant: 'tenant-a', workflow: 'support-reply', class: 'interactive', pattern: { kind: 'spike', base: 1, peak: 5, atSec: 3, forSec: 2 } }] });
    expect(disturbance(spike, 1)).toEqual({ fromMs: 3_000, toMs: 5_000 });
    expect(disturbance(scenario({ faults: [] }), 1)).toBeUndefined();
  });

  it('drains when the backlog is back to its most before the disturbance, or empty after the last arrival without one', () => {
    // One run in flight before the fault; three piled up during it, the last ends 1.5 s after it.
    const sends = [accepted(500, 500, 1_500), accepted(3_000, 3_000, 6_200), accepted(3_100, 3_100, 7_000), accepted(3_200, 3_200, 7_500)];
    expect(drainSec(sends, { fromMs: 2_000, toMs: 6_000 }, 10_000, 20_000)).toBe(1);
    expect(drainSec(sends, undefined, 5_000, 20_000)).toBe(2.5);
    expect(drainSec([accepted(0, 0)], undefined, 5_000, 20_000)).toBeNull();
  });

  it('reads the simulator\'s counters linearly between its samples', () => {
    const calls = cumulativeAt([sample(0, 0), sample(1_000, 10), sample(2_000, 30)], (s) => s.llmCalls);
    expect([-5, 0, 500, 1_000, 1_500, 2_000, 9_000].map(calls)).toEqual([0, 0, 5, 10, 20, 30, 30]);
    expect(cumulativeAt([], (s) => s.llmCalls)(5)).toBe(0);
  });

  it('gives the calls per offered LLM call overall and during the faults, the lost runs and the repeated tool calls', () => {
    const sends = [accepted(0, 1, 100), accepted(2_500, 2_501, 2_600), accepted(3_000, 3_001), refused(4_000, 4_001)];
    const inputs: FigureInputs = {
      scenario: scenario(),
      timeScale: 1,
      sends,
      schedule: [],
      dropped: 0,
      samples: [sample(0, 0), sample(2_000, 2), sample(6_000, 14, 6, 1), sample(10_000, 16, 6, 1)],
      llmCallsPerRun: { 'support-reply': 2 },
      backlogBound: 100,
      endMs: 10_000,
    };
    const f = systemFigures(inputs);
    expect(f.offered).toBe(4);
    expect(f.offeredCalls).toBe(8);
    expect(f.providerCalls).toBe(16);
    expect(f.providerCallsPerOffered).toBe(2);
    // 12 calls in the fault window [2 s, 6 s); 3 sends due in it offer 6.
    expect(f.providerCallsPerOfferedDuringFault).toBe(2);
    expect(f.lost).toBe(1);
    expect(f.duplicates).toBe(1);
    expect(f.cpuWhileSending).toBeNull();
    expect(f.answers).toEqual({ accepted: 3, '429 rate_limited': 1 });
    expect(f.terminal).toEqual({ completed: 2, none: 1 });
    expect(f.completedRequests).toBe(2);
    expect(f.gaveUp).toBe(2);
    expect(f.backlogBound).toBe(100);
    expect(f.quietTenantsP99Ms).toBeNull();
    // Calls after the fault: 2 in [6 s, 10 s) at most 0.5/s; offered: no sends due after 6 s.
    expect(f.peakAfterRatio).toBeNull();
  });

  it('gives the peak call rate after the faults over the rate the sends of that stretch offer', () => {
    const sends = [6_000, 7_000, 8_000, 9_000].map((t) => accepted(t, t + 1, t + 100));
    const samples = [sample(0, 0), sample(6_000, 0), sample(7_000, 6), sample(10_000, 8)];
    const f = systemFigures({ scenario: scenario(), timeScale: 1, sends, schedule: [], dropped: 0, samples, llmCallsPerRun: { 'support-reply': 2 }, backlogBound: null, endMs: 10_000 });
    // 6 calls in [6 s, 7 s); offered 8 calls over 4 s = 2/s.
    expect(f.peakAfterRatio).toBe(3);
  });

  it('compares the quiet tenants when a stream is noisy', () => {
    const noisy = scenario({
      arrivals: [
        { tenant: 'tenant-a', workflow: 'support-reply', class: 'interactive', pattern: { kind: 'constant', rate: 1 }, noisy: true },
        { tenant: 'tenant-c', workflow: 'support-reply', class: 'interactive', pattern: { kind: 'constant', rate: 1 } },
      ],
    });
    const sends = [refused(0, 5), accepted(0, 1, 250, { tenant: 'tenant-c' })];
    const f = systemFigures({ scenario: noisy, timeScale: 1, sends, schedule: [], dropped: 0, samples: [], llmCallsPerRun: {}, backlogBound: null, endMs: 1_000 });
    expect(f.quietTenantsP99Ms).toBeCloseTo(250, -1);
    expect(f.tenantP99Ms['tenant-a']).toBeCloseTo(5, 1);
    expect(f.tenantP99Ms['tenant-c']).toBeCloseTo(250, -1);
  });

  it('bins the timeline per second', () => {
    const sends = [accepted(100, 120, 1_500), refused(200, 210), accepted(1_200, 1_300, 2_100)];
    const inputs: FigureInputs = { scenario: scenario(), timeScale: 1, sends, schedule: [], dropped: 0, samples: [sample(0, 0), sample(3_000, 6, 3)], llmCallsPerRun: { 'support-reply': 2 }, backlogBound: 5, endMs: 3_000 };
    const t = timeline(inputs);
    expect(t.map((s) => s.offered)).toEqual([2, 1, 0]);
    expect(t.map((s) => s.admitted)).toEqual([1, 1, 0]);
    expect(t.map((s) => s.refused)).toEqual([1, 0, 0]);
    expect(t.map((s) => s.completed)).toEqual([0, 1, 1]);
    expect(t.map((s) => s.backlog)).toEqual([1, 1, 0]);
    expect(t.map((s) => s.providerCalls)).toEqual([2, 2, 2]);
    expect(t.map((s) => s.provider429)).toEqual([1, 1, 1]);
    // HDR histograms keep 3 significant digits.
    expect(t[0]!.p99Ms).toBeCloseTo(10, 1);
    expect(t[2]!.p99Ms).toBeCloseTo(900, -1);
  });

  it('counts the goodput: real answers within the deadline from the first send, retries included; stand-ins apart; the wasted calls and the 429s', () => {
    const twoTenants = scenario({
      arrivals: [
        { tenant: 'tenant-a', workflow: 'support-reply', class: 'interactive', pattern: { kind: 'constant', rate: 1 } },
        { tenant: 'tenant-c', workflow: 'support-reply', class: 'interactive', pattern: { kind: 'constant', rate: 1 } },
      ],
    });
    const first = refused(0, 5);
    const c = { tenant: 'tenant-c', stream: 1 };
    const sends = [
      // Refused, sent again at 1 s, answered 1.9 s after the first send: on time (2 s).
      first,
      accepted(1_000, 1_001, 1_900, { request: first.request, attempt: 2 }),
      // A real answer 2.1 s after its send: late.
      accepted(100, 101, 2_200),
      // A stand-in in time: degraded, not goodput.
      accepted(200, 201, 300, { degraded: true }),
      accepted(300, 301, 400, { ...c, terminalStatus: 'failed' }),
      accepted(400, 401, 500, c),
    ];
    const schedule = [0, 100, 200].map((dueMs) => ({ stream: 0, dueMs })).concat([300, 400].map((dueMs) => ({ stream: 1, dueMs })));
    const samples = [sample(0, 0), sample(3_000, 20, 5, 0, { llmRateLimited: 2, llmCallsByTenant: { 'tenant-a': 14, 'tenant-c': 6 } })];
    const f = systemFigures({ scenario: twoTenants, timeScale: 1, sends, schedule, dropped: 0, samples, llmCallsPerRun: { 'support-reply': 2 }, backlogBound: null, endMs: 3_000 });
    expect(f.requests).toBe(5);
    expect(f.completedRequests).toBe(4);
    expect(f.onTimeGoodput).toBe(2);
    expect(f.completedDegraded).toBe(1);
    // No rate limit in the scenario: every request could have been answered.
    expect(f.goodputBound).toBe(5);
    // Three real answers made 6 of the 20 calls.
    expect(f.wastedProviderCalls).toBe(14);
    expect(f.wastedShare).toBeCloseTo(0.7);
    expect(f.provider429s).toBe(2);
    expect(f.provider429Share).toBeCloseTo(0.1);
    expect(f.providerCallsByTenant).toEqual({ 'tenant-a': 14, 'tenant-c': 6 });
    expect(f.weightedShareError).toBeNull();
    expect(f.tenants['tenant-a']).toMatchObject({ requests: 3, completedOnTime: 1, onTimeShare: 1 / 3 });
    expect(f.tenants['tenant-c']).toMatchObject({ requests: 2, completedOnTime: 1, onTimeShare: 0.5 });
    expect(f.tenants['tenant-c']!.p99Ms).toBeCloseTo(f.tenantP99Ms['tenant-c']!, 5);
  });

  it('floors the wasted calls at 0 and has no shares without calls', () => {
    const f = systemFigures({ scenario: scenario(), timeScale: 1, sends: [accepted(0, 1, 100)], schedule: [{ stream: 0, dueMs: 0 }], dropped: 0, samples: [], llmCallsPerRun: { 'support-reply': 2 }, backlogBound: null, endMs: 1_000 });
    expect(f.wastedProviderCalls).toBe(0);
    expect(f.wastedShare).toBeNull();
    expect(f.provider429Share).toBeNull();
  });

  it('bounds the goodput from the scheduled first sends, their class\'s deadline and the provider\'s request limit in force', () => {
    const limited = scenario({
      deadlineSec: { interactive: 2, batch: 60 },
      arrivals: [
        { tenant: 'tenant-a', workflow: 'support-reply', class: 'interactive', pattern: { kind: 'constant', rate: 1 } },
        { tenant: 'tenant-a', workflow: 'support-agent', class: 'interactive', pattern: { kind: 'constant', rate: 1 } },
        { tenant: 'tenant-b', workflow: 'support-reply', class: 'batch', pattern: { kind: 'constant', rate: 1 } },
      ],
      faults: [{ atSec: 0, forSec: 10, target: 'anthropic', fault: { rateLimit: { requestsPerMinute: 2 } } }],
    });
    const schedule = [
      // A full bucket of 2 answers the first; the next 2 calls refill after 60 s, past both deadlines.
      { stream: 0, dueMs: 0 },
      { stream: 0, dueMs: 1_000 },
      // An agent's calls are unknown: taken as none, so it always fits.
      { stream: 1, dueMs: 1_000 },
      // A batch request due at 9 s has until 69 s: its window reaches past the limit's end (10 s).
      { stream: 2, dueMs: 9_000 },
    ];
    expect(scenarioGoodputBound({ scenario: limited, timeScale: 1, schedule, llmCallsPerRun: { 'support-reply': 2 } })).toBe(3);
  });

  it('compares the weighted tenants\' calls with their weights while both send', () => {
    const weighted = scenario({
      arrivals: [
        { tenant: 'tenant-a', workflow: 'support-reply', class: 'batch', pattern: { kind: 'constant', rate: 1 } },
        { tenant: 'tenant-b', workflow: 'support-reply', class: 'batch', pattern: { kind: 'constant', rate: 1 } },
      ],
      tenantWeights: { 'tenant-a': 2, 'tenant-b': 1 },
    });
    const schedule = [0, 1_000, 2_000, 3_000, 4_000].map((dueMs) => ({ stream: 0, dueMs })).concat([500, 1_500, 2_500, 3_500].map((dueMs) => ({ stream: 1, dueMs })));
    const byTenant = (atMs: number, a: number, b: number) => sample(atMs, a + b, 0, 0, { llmCallsByTenant: { 'tenant-a': a, 'tenant-b': b } });
    // From 0.5 s to 3.5 s, a made 40 calls and b 25: 1.6 against 2, 0.2 off. a's calls after b stopped do not count.
    const samples = [byTenant(0, 0, 0), byTenant(500, 1, 1), byTenant(3_500, 41, 26), byTenant(4_000, 100, 26)];
    expect(weightedShareError({ scenario: weighted, schedule, samples })).toBeCloseTo(0.2);
    expect(weightedShareError({ scenario: weighted, schedule, samples: [byTenant(0, 0, 0), byTenant(500, 1, 1), byTenant(3_500, 61, 31)] })).toBeCloseTo(0);
    // A tenant without calls, a scenario without weights, or a tenant that never sends: no ratio.
    expect(weightedShareError({ scenario: weighted, schedule, samples: [byTenant(0, 0, 0), byTenant(3_500, 41, 0)] })).toBeNull();
    expect(weightedShareError({ scenario: scenario(), schedule, samples })).toBeNull();
    expect(weightedShareError({ scenario: weighted, schedule: schedule.filter((s) => s.stream === 0), samples })).toBeNull();
  });
});
