/**
 * What the Dependencies page shows of each dependency, from the console API's reports: plain
 * functions the page only lays out, and the unit tests check.
 */
import type { DependencyReport } from '../api/console/dependencies.js';
import type { DependencySpend } from '../api/console/overview.js';
import type { ForceMode } from '../breakers/breaker-gate.js';
import { formatNumber, formatSeconds } from './view-models.js';

/** A figure against its bound: `use` in 0..1 for a meter (1 when at or past the bound). */
export interface Gauge {
  label: string;
  use: number;
  text: string;
}

export interface DependencyRow {
  dependency: string;
  kind: DependencyReport['kind'];
  /** What calls meet: a force in place wins over the breaker's own state. */
  state: 'closed' | 'open' | 'half-open' | 'forced open' | 'forced closed';
  tone: 'ok' | 'warn' | 'bad';
  /** When the state ends or began, and under a force what the breaker itself says. */
  note: string;
  forced: ForceMode | null;
  failureRate: Gauge;
  slowCallRate: Gauge;
  /** The window's size and what trips the breaker over it. */
  window: string;
  pacing: Gauge[];
  retryBudget: Gauge;
  /** Calls wasted on runs that ended without a real answer, by how they ended, e.g. `12 (failed 9, expired 3)`. */
  wasted: string;
  /** Each tenant's share of the dependency's turns, largest first, e.g. `tenant-a 75%, tenant-b 25%`. */
  turnShares: string;
  /** The forces and clear the page offers for this row. */
  actions: ForceAction[];
}

export type ForceAction = 'force-open' | 'force-closed' | 'clear';

const STATE_NAMES = { closed: 'closed', open: 'open', half_open: 'half-open' } as const;

const percent = (share: number) => `${Math.round(share * 100)}%`;
const use = (value: number, bound: number) => (bound > 0 ? Math.min(1, value / bound) : 1);
const inTime = (ms: number) => formatSeconds(Math.max(0, ms) / 1000);

const BUCKET_LABELS = { requests_per_second: 'requests/s', requests: 'requests/min', input_tokens: 'input tokens/min', output_tokens: 'output tokens/min' } as const;

function stateOf(r: DependencyReport): Pick<DependencyRow, 'state' | 'tone' | 'note' | 'forced' | 'actions'> {
  const b = r.breaker;
  const own = STATE_NAMES[b.state];
  if (b.forced) {
    const note = `until the force ends in ${inTime(b.forced.until - r.at)}; the breaker itself is ${own}`;
    return b.forced.mode === 'open'
      ? { state: 'forced open', tone: 'bad', note, forced: 'open', actions: ['force-closed', 'clear'] }
      : { state: 'forced closed', tone: 'warn', note, forced: 'closed', actions: ['force-open', 'clear'] };
  }
  const actions: ForceAction[] = ['force-open', 'force-closed'];
  if (b.state === 'open') return { state: 'open', tone: 'bad', note: b.retryAt === null ? 'next probe: unknown' : `next probe in ${inTime(b.retryAt - r.at)}`, forced: null, actions };
  if (b.state === 'half_open') return { state: 'half-open', tone: 'warn', note: `${b.probesInFlight} probe${b.probesInFlight === 1 ? '' : 's'} in flight`, forced: null, actions };
  return { state: 'closed', tone: 'ok', note: b.closedAt === null ? '' : `closed ${inTime(r.at - b.closedAt)} ago`, forced: null, actions };
}

/** A record's entries, largest first (ties by name, so the order holds between refreshes). */
const largestFirst = (r: Record<string, number>) => Object.entries(r).sort(([a, x], [b, y]) => y - x || (a < b ? -1 : 1));

function wastedText(wasted: Record<string, number>): string {
  const total = Object.values(wasted).reduce((a, b) => a + b, 0);
  return total === 0 ? 'none' : `${total} (${largestFirst(wasted).map(([reason, n]) => `${reason} ${n}`).join(', ')})`;
}

function turnSharesText(turns: Record<string, number>): string {
  const total = Object.values(turns).reduce((a, b) => a + b, 0);
  return total === 0 ? 'none booked' : largestFirst(turns).map(([tenant, n]) => `${tenant} ${percent(n / total)}`).join(', ');
}

/** One row per dependency, in the order the API sent them (config order), with what its calls went to (`spend`, by dependency). */
export function dependencyRows(reports: readonly DependencyReport[], spend: Readonly<Record<string, DependencySpend>> = {}): DependencyRow[] {
  return reports.map((r) => {
    const { window: w, policy: p } = r.breaker;
    const failureShare = w.calls > 0 ? w.failures / w.calls : 0;
    const slowShare = w.calls > 0 ? w.slowCalls / w.calls : 0;
    return {
      dependency: r.dependency,
      kind: r.kind,
      ...stateOf(r),
      failureRate: { label: 'failures', use: use(failureShare, p.failureRateThreshold), text: `${percent(failureShare)} (${w.failures} of ${w.calls}); opens at ${percent(p.failureRateThreshold)} or ${p.failureThreshold} failures` },
      slowCallRate: { label: 'slow calls', use: use(slowShare, p.slowCallRateThreshold), text: `${percent(slowShare)} (${w.slowCalls} ≥ ${formatSeconds(p.slowCallMs / 1000)}); opens at ${percent(p.slowCallRateThreshold)}` },
      window: `last ${formatSeconds(p.windowMs / 1000)}, judged from ${p.minimumCalls} calls`,
      pacing: r.pacing.buckets.map((b) => ({
        label: BUCKET_LABELS[b.bucket],
        use: use(b.used, b.burst),
        text: `${formatNumber(b.used)} of ${formatNumber(b.burst)} booked; limit ${formatNumber(b.perMinute)}/min (${b.source})`,
      })),
      retryBudget: { label: 'retries', use: use(r.retryBudget.retries, r.retryBudget.allowed), text: `${r.retryBudget.retries} of ${r.retryBudget.allowed} allowed (${percent(r.retryBudget.ratio)} of ${r.retryBudget.calls} calls) in the last ${formatSeconds(r.retryBudget.windowMs / 1000)}` },
      wasted: wastedText(spend[r.dependency]?.wasted ?? {}),
      turnShares: turnSharesText(spend[r.dependency]?.turns ?? {}),
    };
  });
}

/** What the confirmation says a force or clear does, before the operator agrees to it. */
export function forceWarning(dependency: string, action: ForceAction, minutes: number): string {
  if (action === 'clear') return `End the force on ${dependency}? Its breaker decides again at once, from its own state.`;
  const lasting = `for ${minutes} min (it ends by itself then)`;
  return action === 'force-open'
    ? `Force ${dependency} open ${lasting}? Every call to it is refused: runs needing it wait or get their fallback.`
    : `Force ${dependency} closed ${lasting}? Every call goes through whatever its failures; the window still counts them.`;
}

/** Durations the confirmation offers, in minutes: a drill's length, up to the API's hour. */
export const FORCE_MINUTES = [5, 15, 30, 60] as const;
