import type { BacklogCount } from '../../admission/backlog-census.js';
import type { BreakerView } from '../../breakers/breaker-gate.js';
import type { LagReport } from '../../lag/lag-report.js';
import { STATUS_CODE } from '../../lag/lag-status.js';
import { ALERT_RULES, forMs, matches, windowMs, type AlertName, type AlertSeverity } from './alert-rules.js';
import { increaseOver, sumOf, tallyAgo, type Tally } from './overview.js';

/** A condition of ops/prometheus/rules/sluice-alerts.yml that holds, named as its rule. */
export interface ActiveAlert {
  alert: AlertName;
  severity: AlertSeverity;
  summary: string;
}

/** One alert of a rule: the rule, and what it is about (a group, a dependency, ...; '' when the rule has one alert). */
export interface HeldCondition extends ActiveAlert {
  subject: string;
}

/** A condition that holds but not yet for its rule's `for:` duration. */
export interface PendingAlert extends ActiveAlert {
  /** Epoch ms since when it has held. */
  since: number;
  forMs: number;
}

/** The admission backlog against its bounds, read from Redis. */
export interface BacklogUse {
  tenants: readonly { tenant: string; runs: number; limit: number }[];
  global: { runs: number; limit: number };
}

/** The backlog census (per tenant and class) against the tenants' and the global bounds. */
export function backlogUse(counts: readonly BacklogCount[], limits: { tenants: Readonly<Record<string, number>>; global: number }): BacklogUse {
  const runs = new Map<string, number>();
  for (const c of counts) runs.set(c.tenant, (runs.get(c.tenant) ?? 0) + c.runs);
  return {
    tenants: Object.entries(limits.tenants).map(([tenant, limit]) => ({ tenant, runs: runs.get(tenant) ?? 0, limit })),
    global: { runs: sumOf(Object.fromEntries(runs)), limit: limits.global },
  };
}

/** Each group's total lag in messages as one lag report had it. */
export interface LagSnapshot {
  at: number;
  lag: Readonly<Record<string, number>>;
}

export interface AlertInputs {
  /** The lag monitor's last report; undefined when none is in Redis, 'unreadable' when Redis could not be read. */
  lag: LagReport | undefined | 'unreadable';
  /** Earlier reports' group lags, oldest first (the stalled rule asks whether lag grew). */
  lagHistory: readonly LagSnapshot[];
  backlog: BacklogUse | 'unreadable';
  breakers: readonly BreakerView[];
  /** This instance's counters, oldest first (the Overview sampler's). */
  tallies: readonly Tally[];
}

const seconds = (s: number) => (s >= 120 ? `${Math.round(s / 60)} min` : `${Math.round(s)} s`);
const percent = (x: number) => `${Math.round(100 * x)}%`;

const LAG_RULES: readonly AlertName[] = [
  'SluiceInteractiveLagHigh',
  'SluiceBatchLagHigh',
  'SluiceStatusSinkLagHigh',
  'SluiceConsumerGroupStalled',
  'SluiceConsumerGroupRewound',
  'SluiceConsumerGroupEmpty',
  'SluiceNoProcessors',
  'SluiceLagMonitorAbsent',
];
const BACKLOG_RULES: readonly AlertName[] = ['SluiceTenantBacklogNearBound', 'SluiceBacklogNearGlobalBound'];

function held(alert: AlertName, subject: string, summary: string): HeldCondition {
  return { alert, severity: ALERT_RULES[alert].severity, summary, subject };
}

/** Growth of a group's lag over the window ending at `now`: newest minus oldest snapshot inside it (PromQL's delta, without extrapolation). */
export function lagGrowth(history: readonly LagSnapshot[], group: string, now: number, window: number): number {
  const inside = history.filter((s) => s.at >= now - window && s.lag[group] !== undefined);
  if (inside.length < 2) return 0;
  return inside[inside.length - 1]!.lag[group]! - inside[0]!.lag[group]!;
}

/** The largest time lag per group and topic of the groups and topics a rule matches. */
function topicLags(report: LagReport, rule: AlertName): { group: string; topic: string; lagSeconds: number }[] {
  const out = new Map<string, { group: string; topic: string; lagSeconds: number }>();
  for (const g of report.groups) {
    if (!matches(rule, 'group', g.group)) continue;
    for (const p of g.partitions) {
      if (!matches(rule, 'topic', p.topic)) continue;
      const key = `${g.group}/${p.topic}`;
      const prev = out.get(key);
      if (!prev || p.lagSeconds > prev.lagSeconds) out.set(key, { group: g.group, topic: p.topic, lagSeconds: p.lagSeconds });
    }
  }
  return [...out.values()];
}

function lagConditions(report: LagReport | undefined, history: readonly LagSnapshot[], now: number): HeldCondition[] {
  if (!report) return [held('SluiceLagMonitorAbsent', '', 'No Sluice instance exports consumer lag (no lag monitor report in Redis)')];
  const out: HeldCondition[] = [];
  const overSeconds = (rule: AlertName, summary: (s: number) => string) => {
    const [limit] = ALERT_RULES[rule].thresholds;
    for (const t of topicLags(report, rule)) if (t.lagSeconds > limit!) out.push(held(rule, `${t.group}/${t.topic}`, summary(t.lagSeconds)));
  };
  overSeconds('SluiceInteractiveLagHigh', (s) => `Interactive runs wait ${seconds(s)} in Kafka before a processor reads them`);
  overSeconds('SluiceBatchLagHigh', (s) => `Batch runs wait ${seconds(s)} in Kafka before a processor reads them`);
  overSeconds('SluiceStatusSinkLagHigh', (s) => `Run status reaches Postgres ${seconds(s)} late`);
  const [stall, stop, grown] = ALERT_RULES.SluiceConsumerGroupStalled.thresholds;
  const [rewound] = ALERT_RULES.SluiceConsumerGroupRewound.thresholds;
  const [noMembers, someLag] = ALERT_RULES.SluiceConsumerGroupEmpty.thresholds;
  const [, noProcessors] = ALERT_RULES.SluiceNoProcessors.thresholds;
  for (const g of report.groups) {
    const code = STATUS_CODE[g.status];
    if ((code === stall || code === stop) && matches('SluiceConsumerGroupStalled', 'group', g.group) && lagGrowth(history, g.group, now, windowMs('SluiceConsumerGroupStalled')) > grown) {
      out.push(held('SluiceConsumerGroupStalled', g.group, `Consumer group ${g.group} is stuck while its lag grows (${g.status})`));
    }
    if (code === rewound) out.push(held('SluiceConsumerGroupRewound', g.group, `Consumer group ${g.group} went back to an earlier offset`));
    if (g.members === noMembers && Number(g.lagMessages) > someLag) out.push(held('SluiceConsumerGroupEmpty', g.group, `No consumer in group ${g.group} while it has lag (${g.lagMessages} messages)`));
    if (g.members === noProcessors && matches('SluiceNoProcessors', 'group', g.group)) out.push(held('SluiceNoProcessors', g.group, `No processor is in group ${g.group}`));
  }
  return out;
}

function admissionConditions(tallies: readonly Tally[]): HeldCondition[] {
  const now = tallies[tallies.length - 1];
  const before = tallyAgo(tallies, windowMs('SluiceAdmissionRefusing'));
  if (!now || !before || now.at <= before.at) return [];
  const increase = increaseOver(before.admission, now.admission);
  const total = sumOf(increase);
  const out: HeldCondition[] = [];
  for (const rule of ['SluiceAdmissionRefusing', 'SluiceAdmissionRejecting'] as const) {
    const [share, minRate] = ALERT_RULES[rule].thresholds;
    if (total / ((now.at - before.at) / 1000) <= minRate!) continue;
    const counted = sumOf(Object.fromEntries(Object.entries(increase).filter(([outcome]) => matches(rule, 'outcome', outcome))));
    if (counted / total <= share!) continue;
    out.push(held(rule, '', rule === 'SluiceAdmissionRefusing' ? `Sluice refuses ${percent(counted / total)} of submissions` : `Sluice rejects ${percent(counted / total)} of submissions with 503`));
  }
  return out;
}

function backlogConditions(backlog: BacklogUse): HeldCondition[] {
  const out: HeldCondition[] = [];
  const [tenantShare] = ALERT_RULES.SluiceTenantBacklogNearBound.thresholds;
  for (const t of backlog.tenants) {
    if (t.runs / t.limit > tenantShare) out.push(held('SluiceTenantBacklogNearBound', t.tenant, `Tenant ${t.tenant} uses ${percent(t.runs / t.limit)} of its backlog bound`));
  }
  const [globalShare] = ALERT_RULES.SluiceBacklogNearGlobalBound.thresholds;
  const share = backlog.global.runs / backlog.global.limit;
  if (share > globalShare) out.push(held('SluiceBacklogNearGlobalBound', '', `Sluice's admission backlog is at ${percent(share)} of its bound`));
  return out;
}

function counterConditions(tallies: readonly Tally[]): HeldCondition[] {
  const now = tallies[tallies.length - 1];
  if (!now) return [];
  const out: HeldCondition[] = [];
  const increase = (rule: AlertName, pick: (t: Tally) => Record<string, number>) => increaseOver(pick(tallyAgo(tallies, windowMs(rule)) ?? now), pick(now));
  const [lost] = ALERT_RULES.SluicePermitLeaseLost.thresholds;
  if (sumOf(increase('SluicePermitLeaseLost', (t) => ({ lost: t.leasesLost }))) > lost) out.push(held('SluicePermitLeaseLost', '', 'Permit leases expired while their runs still ran'));
  const [spent] = ALERT_RULES.SluiceRetryBudgetExhausted.thresholds;
  for (const [dependency, n] of Object.entries(increase('SluiceRetryBudgetExhausted', (t) => t.retryBudgetExhausted))) {
    if (n > spent) out.push(held('SluiceRetryBudgetExhausted', dependency, `Retry budget of ${dependency} is spent`));
  }
  const [letters] = ALERT_RULES.SluiceDeadLettersGrowing.thresholds;
  for (const [reason, n] of Object.entries(increase('SluiceDeadLettersGrowing', (t) => t.deadLetters))) {
    if (n > letters) out.push(held('SluiceDeadLettersGrowing', reason, `${n} records dead-lettered (${reason}) in 15 minutes`));
  }
  return out;
}

/**
 * The alert rules' conditions that hold at `now`, and the rules that could not be evaluated (their
 * input unreadable): those keep whatever state they had. The rules see every instance's counters
 * where these see this instance's (admission, leases, retry budgets, dead letters).
 */
export function alertConditions(inputs: AlertInputs, now: number): { held: HeldCondition[]; unevaluated: Set<AlertName> } {
  const unevaluated = new Set<AlertName>([...(inputs.lag === 'unreadable' ? LAG_RULES : []), ...(inputs.backlog === 'unreadable' ? BACKLOG_RULES : [])]);
  const [closed] = ALERT_RULES.SluiceBreakerOpen.thresholds;
  const breakers = inputs.breakers
    .filter((b) => (b.state === 'closed' ? 0 : 1) > closed)
    .map((b) => held('SluiceBreakerOpen', b.name, `Breaker of ${b.name} is ${b.state === 'open' ? 'open' : 'half-open'}`));
  return {
    held: [
      ...(inputs.lag === 'unreadable' ? [] : lagConditions(inputs.lag, inputs.lagHistory, now)),
      ...admissionConditions(inputs.tallies),
      ...(inputs.backlog === 'unreadable' ? [] : backlogConditions(inputs.backlog)),
      ...breakers,
      ...counterConditions(inputs.tallies),
    ],
    unevaluated,
  };
}

/** Since when each condition has held, by rule and subject. */
export type AlertClock = ReadonlyMap<string, { since: number; condition: HeldCondition }>;

export interface AlertState {
  clock: AlertClock;
  /** Held for at least their rule's `for:`: the banner's. */
  firing: ActiveAlert[];
  pending: PendingAlert[];
}

const ORDER: Record<AlertSeverity, number> = { critical: 0, warning: 1, info: 2 };
const bySeverity = (a: ActiveAlert, b: ActiveAlert) => ORDER[a.severity] - ORDER[b.severity] || a.alert.localeCompare(b.alert);

/**
 * One evaluation, as Prometheus's: a condition that holds keeps the time it began holding (its
 * summary is the latest), one that no longer holds is forgotten, and one held for its rule's
 * `for:` fires. Rules that could not be evaluated keep their entries as they were.
 */
export function advanceAlerts(clock: AlertClock, evaluation: { held: readonly HeldCondition[]; unevaluated: ReadonlySet<AlertName> }, now: number): AlertState {
  const next = new Map<string, { since: number; condition: HeldCondition }>();
  for (const [key, entry] of clock) if (evaluation.unevaluated.has(entry.condition.alert)) next.set(key, entry);
  for (const condition of evaluation.held) {
    const key = `${condition.alert}/${condition.subject}`;
    next.set(key, { since: clock.get(key)?.since ?? now, condition });
  }
  const firing: ActiveAlert[] = [];
  const pending: PendingAlert[] = [];
  for (const { since, condition } of next.values()) {
    const { alert, severity, summary } = condition;
    const wait = forMs(alert);
    if (now - since >= wait) firing.push({ alert, severity, summary });
    else pending.push({ alert, severity, summary, since, forMs: wait });
  }
  return { clock: next, firing: firing.sort(bySeverity), pending: pending.sort(bySeverity) };
}

/** Group lags of a report, for the history the stalled rule reads. */
export function lagSnapshot(report: LagReport): LagSnapshot {
  return { at: report.at, lag: Object.fromEntries(report.groups.map((g) => [g.group, Number(g.lagMessages)])) };
}

/**
 * Evaluates the alert rules at each check (the console checks every Overview sample interval, so
 * a `for:` is honoured to within one interval), keeping each condition's start and the group lags of the last
 * stalled-rule window. In memory: a restarted API starts every `for:` again.
 */
export class AlertWatch {
  private state: AlertState = { clock: new Map(), firing: [], pending: [] };
  private history: LagSnapshot[] = [];

  constructor(
    private readonly read: () => Promise<Omit<AlertInputs, 'lagHistory'>>,
    private readonly now: () => number = Date.now,
  ) {}

  current(): Pick<AlertState, 'firing' | 'pending'> {
    return { firing: this.state.firing, pending: this.state.pending };
  }

  async check(): Promise<void> {
    const inputs = await this.read();
    const now = this.now();
    if (inputs.lag && inputs.lag !== 'unreadable' && inputs.lag.at !== this.history[this.history.length - 1]?.at) {
      this.history.push(lagSnapshot(inputs.lag));
      const keepFrom = now - windowMs('SluiceConsumerGroupStalled');
      this.history = this.history.filter((s) => s.at >= keepFrom);
    }
    this.state = advanceAlerts(this.state.clock, alertConditions({ ...inputs, lagHistory: this.history }, now), now);
  }
}
