/**
 * A scenario run's verdict on its targets and its printed table (pure). Targets are Sluice's: the
 * naive system is the baseline the figures are compared with, side by side. A target is an upper
 * bound on its figure, or a lower one for those in AT_LEAST_TARGETS.
 */
import type { CpuShares } from '../cpu-time.js';
import type { SystemFigures } from './figures.js';
import type { RunLabel } from './systems.js';
import { AT_LEAST_TARGETS, type Scenario, type ScenarioTargets } from './scenario.js';

export interface ScenarioReport {
  scenario: string;
  timeScale: number;
  seed: number;
  systems: Partial<Record<RunLabel, SystemFigures>>;
  targets: TargetVerdict[];
  chart?: string;
}

export interface TargetVerdict {
  /** The target's name; a per-tenant target's is `<target>.<tenant>`. */
  target: string;
  /** `atMost`: the figure must not exceed the bound; `atLeast`: it must reach it. */
  direction: 'atMost' | 'atLeast';
  bound: number;
  /** Sluice's figure; null when it could not be measured (e.g. the backlog never drained). */
  value: number | null;
  met: boolean;
}

type ScalarTarget = Exclude<keyof ScenarioTargets, 'tenantOnTimeShare'>;

/** Sluice's figure for a target; the calls ratio is the fault windows' when the scenario has faults. */
function figureFor(target: ScalarTarget, systems: Partial<Record<RunLabel, SystemFigures>>): number | null {
  const s = systems.sluice;
  if (s === undefined) return null;
  switch (target) {
    case 'interactiveP99Ms':
      return s.interactiveP99Ms;
    case 'answerP99Ms':
      return s.answerP99Ms;
    case 'providerCallsPerOffered':
      return s.providerCallsPerOfferedDuringFault ?? s.providerCallsPerOffered;
    case 'drainSec':
      return s.drainSec;
    case 'peakAfterRatio':
      return s.peakAfterRatio;
    case 'quietTenantsP99Ratio': {
      const alone = systems['sluice-without-noisy']?.quietTenantsP99Ms;
      return s.quietTenantsP99Ms === null || alone === undefined || alone === null || alone === 0 ? null : s.quietTenantsP99Ms / alone;
    }
    case 'lost':
      return s.lost;
    case 'duplicates':
      return s.duplicates;
    case 'onTimeGoodputOfBound':
      return s.goodputBound === 0 ? null : s.onTimeGoodput / s.goodputBound;
    case 'wastedShare':
      return s.wastedShare;
    case 'provider429Share':
      return s.provider429Share;
    case 'weightedShareError':
      return s.weightedShareError;
  }
}

function verdict(target: string, direction: TargetVerdict['direction'], bound: number, figure: number | null): TargetVerdict {
  // A latency of nothing (no such request) is NaN: not measured.
  const value = figure !== null && Number.isFinite(figure) ? figure : null;
  return { target, direction, bound, value, met: value !== null && (direction === 'atLeast' ? value >= bound : value <= bound) };
}

/** Every target the scenario sets, in file order, a per-tenant one once per tenant it names. */
export function targetVerdicts(scenario: Scenario, systems: Partial<Record<RunLabel, SystemFigures>>): TargetVerdict[] {
  const { tenantOnTimeShare, ...scalar } = scenario.targets;
  return (Object.keys(scenario.targets) as (keyof ScenarioTargets)[]).flatMap((target) => {
    const direction = AT_LEAST_TARGETS.has(target) ? 'atLeast' : 'atMost';
    if (target === 'tenantOnTimeShare') {
      return Object.entries(tenantOnTimeShare ?? {}).map(([tenant, min]) => verdict(`${target}.${tenant}`, direction, min, systems.sluice?.tenants[tenant]?.onTimeShare ?? null));
    }
    const bound = scalar[target];
    return bound === undefined ? [] : [verdict(target, direction, bound, figureFor(target, systems))];
  });
}

const num = (v: number | null, digits = 0): string => (v === null || !Number.isFinite(v) ? 'n/a' : v.toFixed(digits));
const percent = (v: number | null): string => (v === null ? 'n/a' : `${(v * 100).toFixed(1)} %`);
const tally = (r: Record<string, number>): string =>
  Object.entries(r)
    .sort((a, b) => b[1] - a[1])
    .map(([k, n]) => `${k} ${n}`)
    .join(', ');

function cpuCell(c: CpuShares | null): string {
  if (c === null) return 'n/a';
  const parts = Object.entries(c.byProcess).map(([name, percent]) => `${name} ${percent.toFixed(0)}`);
  return `machine ${c.machineBusyPercent.toFixed(0)} of ${c.cores * 100}: ${parts.join(', ')}`;
}

const ROWS: [string, (f: SystemFigures) => string][] = [
  ['sends offered (client retries included) / requests', (f) => `${f.offered} / ${f.requests}`],
  ['answers', (f) => tally(f.answers)],
  ['terminal statuses of accepted runs', (f) => tally(f.terminal)],
  ['requests answered by a completed run (stand-ins included) / without one', (f) => `${f.completedRequests} / ${f.gaveUp}`],
  ['on-time goodput (real answers within the deadline from the first send) / bound', (f) => `${f.onTimeGoodput} / ${f.goodputBound}`],
  ['requests answered by a stand-in (degraded)', (f) => String(f.completedDegraded)],
  ['per tenant: on time / requests (share), p99 send → answer (ms)', (f) => Object.entries(f.tenants).map(([t, v]) => `${t} ${v.completedOnTime} / ${v.requests} (${num(v.onTimeShare * 100)} %), ${num(v.p99Ms)}`).join('; ')],
  ['interactive send → answer p50 / p99 / max (ms)', (f) => `${num(f.latency.interactive.toAnswer.p50)} / ${num(f.latency.interactive.toAnswer.p99)} / ${num(f.latency.interactive.toAnswer.max)}`],
  ['interactive send → first event p50 / p99 (ms)', (f) => `${num(f.latency.interactive.toFirstEvent.p50)} / ${num(f.latency.interactive.toFirstEvent.p99)}`],
  ['batch send → answer p50 / p99 / max (ms)', (f) => `${num(f.latency.batch.toAnswer.p50)} / ${num(f.latency.batch.toAnswer.p99)} / ${num(f.latency.batch.toAnswer.max)}`],
  ['HTTP answer p50 / p99 / max (ms)', (f) => `${num(f.httpAnswer.p50)} / ${num(f.httpAnswer.p99)} / ${num(f.httpAnswer.max)}`],
  ['p99 per tenant, send → answer (ms)', (f) => Object.entries(f.tenantP99Ms).map(([t, v]) => `${t} ${num(v)}`).join(', ')],
  ['LLM calls / offered (overall)', (f) => `${num(f.providerCalls)} / ${num(f.offeredCalls)} = ${num(f.providerCallsPerOffered, 2)}`],
  ['LLM calls per offered during the faults', (f) => num(f.providerCallsPerOfferedDuringFault, 2)],
  ['LLM calls wasted (in no completed real answer) / share', (f) => `${num(f.wastedProviderCalls)} / ${percent(f.wastedShare)}`],
  ['provider rate-limit 429s / share of calls', (f) => `${num(f.provider429s)} / ${percent(f.provider429Share)}`],
  ['LLM calls per tenant', (f) => tally(f.providerCallsByTenant)],
  // No vertical bars in a name: the table's cells are split by them.
  ['weighted share error (calls ratio ÷ weights ratio, distance from 1)', (f) => num(f.weightedShareError, 2)],
  ['backlog peak / bound', (f) => `${f.backlogPeak} / ${f.backlogBound ?? 'none'}`],
  ['drain after the disturbance (s)', (f) => num(f.drainSec, 1)],
  ['peak LLM calls/s after the faults / offered', (f) => num(f.peakAfterRatio, 2)],
  ['lost (accepted, never ended)', (f) => String(f.lost)],
  ['repeated tool calls (duplicates)', (f) => String(f.duplicates)],
  ['client sends dropped (client behind)', (f) => String(f.dropped)],
  ['CPU while sending, % of one core (machine: cores × 100)', (f) => cpuCell(f.cpuWhileSending)],
];

export function scenarioTable(r: ScenarioReport): string {
  const labels = Object.keys(r.systems) as RunLabel[];
  const lines = [
    `scenario ${r.scenario}, time scale ${r.timeScale}, seed ${r.seed}`,
    '',
    `| figure | ${labels.join(' | ')} |`,
    `|---|${labels.map(() => '---').join('|')}|`,
    ...ROWS.map(([name, cell]) => `| ${name} | ${labels.map((l) => cell(r.systems[l]!)).join(' | ')} |`),
    '',
    '| target (Sluice) | bound | value | |',
    '|---|---|---|---|',
    ...r.targets.map((t) => `| ${t.target} | ${t.direction === 'atLeast' ? '>=' : '<='} ${t.bound} | ${num(t.value, 2)} | ${t.met ? 'met' : 'NOT met'} |`),
  ];
  if (r.chart !== undefined) lines.push('', `chart: ${r.chart}`);
  return `${lines.join('\n')}\n`;
}
