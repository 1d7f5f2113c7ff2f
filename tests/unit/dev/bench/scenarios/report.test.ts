import { describe, expect, it } from 'vitest';
import type { SystemFigures } from '../../../../../src/dev/bench/scenarios/figures.js';
import { faultChangesMs } from '../../../../../src/dev/bench/scenarios/provider-timeline.js';
import { scenarioTable, targetVerdicts } from '../../../../../src/dev/bench/scenarios/report.js';
import { loadScenario } from '../../../../../src/dev/bench/scenarios/scenario.js';

const summary = { count: 1, p50: 1, p99: 1, max: 1 };
const figures = (over: Partial<SystemFigures>): SystemFigures => ({
  offered: 10,
  requests: 8,
  dropped: 0,
  answers: { accepted: 8, '429 rate_limited': 2 },
  terminal: { completed: 8 },
  completedRequests: 8,
  gaveUp: 0,
  onTimeGoodput: 7,
  completedDegraded: 1,
  goodputBound: 8,
  tenants: { 'tenant-a': { requests: 8, completedOnTime: 7, onTimeShare: 0.875, p99Ms: 1 } },
  latency: { interactive: { toAnswer: summary, toFirstEvent: summary }, batch: { toAnswer: summary, toFirstEvent: summary } },
  httpAnswer: summary,
  tenantP99Ms: { 'tenant-a': 1 },
  quietTenantsP99Ms: null,
  interactiveP99Ms: 1_500,
  answerP99Ms: 20,
  providerCalls: 20,
  offeredCalls: 20,
  providerCallsPerOffered: 1,
  providerCallsPerOfferedDuringFault: 1.3,
  wastedProviderCalls: 4,
  wastedShare: 0.2,
  provider429s: 1,
  provider429Share: 0.05,
  providerCallsByTenant: { 'tenant-a': 20 },
  weightedShareError: null,
  backlogPeak: 4,
  backlogBound: 5_000,
  drainSec: null,
  peakAfterRatio: 1.2,
  lost: 0,
  duplicates: 0,
  cpuWhileSending: null,
  ...over,
});

describe('scenario report', () => {
  it('checks each target the scenario sets against Sluice\'s figure, the calls during the faults when there are faults', () => {
    const verdicts = targetVerdicts(loadScenario('avalanche'), { sluice: figures({}), naive: figures({ interactiveP99Ms: 40_000 }) });
    expect(verdicts).toEqual([
      { target: 'interactiveP99Ms', direction: 'atMost', bound: 1_500, value: 1_500, met: true },
      { target: 'providerCallsPerOffered', direction: 'atMost', bound: 1.2, value: 1.3, met: false },
      { target: 'drainSec', direction: 'atMost', bound: 10, value: null, met: false },
      { target: 'peakAfterRatio', direction: 'atMost', bound: 1.5, value: 1.2, met: true },
      { target: 'lost', direction: 'atMost', bound: 0, value: 0, met: true },
      { target: 'duplicates', direction: 'atMost', bound: 0, value: 0, met: true },
    ]);
  });

  it('checks the goodput targets: at least a share of the bound and of each named tenant\'s requests, at most the wasted calls and the 429s', () => {
    const sluice = figures({
      tenants: {
        'tenant-b': { requests: 60, completedOnTime: 57, onTimeShare: 0.95, p99Ms: 900 },
        'tenant-c': { requests: 240, completedOnTime: 200, onTimeShare: 200 / 240, p99Ms: 900 },
      },
    });
    const verdicts = targetVerdicts(loadScenario('capacity-avalanche'), { sluice });
    expect(verdicts.filter((v) => !['interactiveP99Ms', 'providerCallsPerOffered', 'lost', 'duplicates'].includes(v.target))).toEqual([
      { target: 'onTimeGoodputOfBound', direction: 'atLeast', bound: 0.9, value: 7 / 8, met: false },
      { target: 'wastedShare', direction: 'atMost', bound: 0.05, value: 0.2, met: false },
      { target: 'provider429Share', direction: 'atMost', bound: 0.01, value: 0.05, met: false },
      { target: 'tenantOnTimeShare.tenant-b', direction: 'atLeast', bound: 0.95, value: 0.95, met: true },
      { target: 'tenantOnTimeShare.tenant-c', direction: 'atLeast', bound: 0.95, value: 200 / 240, met: false },
    ]);
    // No bound (nothing could be on time) and a tenant that sent nothing: not measured.
    const none = targetVerdicts(loadScenario('capacity-avalanche'), { sluice: figures({ goodputBound: 0, tenants: {} }) });
    expect(none.find((v) => v.target === 'onTimeGoodputOfBound')).toMatchObject({ value: null, met: false });
    expect(none.find((v) => v.target === 'tenantOnTimeShare.tenant-c')).toMatchObject({ value: null, met: false });
  });

  it('checks the weighted share', () => {
    const [verdict] = targetVerdicts(loadScenario('weighted-share'), { sluice: figures({ weightedShareError: 0.08 }) }).filter((v) => v.target === 'weightedShareError');
    expect(verdict).toEqual({ target: 'weightedShareError', direction: 'atMost', bound: 0.1, value: 0.08, met: true });
  });

  it('counts a latency of nothing as not measured, so its target is not met', () => {
    const [verdict] = targetVerdicts(loadScenario('spike'), { sluice: figures({ answerP99Ms: NaN }) });
    expect(verdict).toEqual({ target: 'answerP99Ms', direction: 'atMost', bound: 100, value: null, met: false });
  });

  it('compares the quiet tenants with and without the noisy one', () => {
    const verdicts = targetVerdicts(loadScenario('noisy-neighbour'), {
      sluice: figures({ quietTenantsP99Ms: 330 }),
      'sluice-without-noisy': figures({ quietTenantsP99Ms: 300 }),
    });
    expect(verdicts[0]).toEqual({ target: 'quietTenantsP99Ratio', direction: 'atMost', bound: 1.2, value: 1.1, met: true });
    expect(targetVerdicts(loadScenario('noisy-neighbour'), { sluice: figures({ quietTenantsP99Ms: 330 }) })[0]!.met).toBe(false);
  });

  it('prints one column per system and a line per target', () => {
    const table = scenarioTable({ scenario: 'spike', timeScale: 2, seed: 1, systems: { sluice: figures({}), naive: figures({}) }, targets: [
        { target: 'answerP99Ms', direction: 'atMost', bound: 100, value: 20, met: true },
        { target: 'onTimeGoodputOfBound', direction: 'atLeast', bound: 0.9, value: 0.875, met: false },
      ],
    });
    expect(table).toContain('| figure | sluice | naive |');
    expect(table).toContain('| answerP99Ms | <= 100 | 20.00 | met |');
    expect(table).toContain('| onTimeGoodputOfBound | >= 0.9 | 0.88 | NOT met |');
    expect(table).toContain('| on-time goodput (real answers within the deadline from the first send) / bound | 7 / 8 | 7 / 8 |');
    expect(table).toContain('| per tenant: on time / requests (share), p99 send → answer (ms) | tenant-a 7 / 8 (88 %), 1 | tenant-a 7 / 8 (88 %), 1 |');
    expect(table).toContain('| LLM calls wasted (in no completed real answer) / share | 4 / 20.0 % | 4 / 20.0 % |');
    expect(table).toContain('| provider rate-limit 429s / share of calls | 1 / 5.0 % | 1 / 5.0 % |');
    // Every row has one cell per system, so no figure's name may hold a cell separator.
    const figureRows = table.split('\n\n')[1]!.split('\n').filter((l) => l.startsWith('| '));
    expect(figureRows.length).toBeGreaterThan(20);
    for (const row of figureRows) expect(row.split('|').length, row).toBe(5);
    expect(table).toContain('| backlog peak / bound | 4 / 5000 | 4 / 5000 |');
    expect(table).toContain('| CPU while sending, % of one core (machine: cores × 100) | n/a | n/a |');
  });

  it('prints where the CPU went while the scenario sent', () => {
    const cpu = { windowSec: 30, cores: 2, machineBusyPercent: 187.4, byProcess: { api: 28.2, processor: 39.6, 'rest of the machine': 60 } };
    const table = scenarioTable({ scenario: 'spike', timeScale: 2, seed: 1, systems: { sluice: figures({ cpuWhileSending: cpu }) }, targets: [] });
    expect(table).toContain('| CPU while sending, % of one core (machine: cores × 100) | machine 187 of 200: api 28, processor 40, rest of the machine 60 |');
  });

  it('changes the faults at each window\'s start and end, scaled, once per instant', () => {
    const w = (atSec: number, forSec: number) => ({ atSec, forSec, target: 'anthropic', fault: { latencyMs: 1 } });
    expect(faultChangesMs([w(30, 30), w(60, 10), w(10, 5)], 2)).toEqual([5_000, 7_500, 15_000, 30_000, 35_000]);
    expect(faultChangesMs([], 1)).toEqual([]);
  });
});
