import type { BreakerView } from '../../breakers/breaker-gate.js';
import type { LagReport } from '../../lag/lag-report.js';
import { increaseOver, sumOf, type Tally } from './overview.js';

export type AlertSeverity = 'critical' | 'warning' | 'info';

/** A condition of ops/prometheus/rules/sluice-alerts.yml that holds now, named as its rule. */
export interface ActiveAlert {
  alert: string;
  severity: AlertSeverity;
  summary: string;
}

export interface AlertInputs {
  /** The lag monitor's last report; undefined when none is in Redis. */
  lag: LagReport | undefined;
  breakers: readonly BreakerView[];
  /** This instance's counters now, 5 and 15 minutes ago (or as far back as kept). */
  now: Tally | undefined;
  fiveMinutesAgo: Tally | undefined;
  fifteenMinutesAgo: Tally | undefined;
}

// The rules' own label matchers: groups and topics end with the namespace-free Sluice names.
const PROCESSOR_GROUP = /(^|.*)sluice[.]processor$/;
const STATUS_SINK_GROUP = /(^|.*)sluice[.]status-sink$/;
const RETRY_FORWARDER_GROUP = /(^|.*)sluice[.]retry-forwarder$/;
const INTERACTIVE_TOPIC = /(^|.*)sluice[.]runs[.]interactive$/;
const BATCH_TOPIC = /(^|.*)sluice[.]runs[.]batch$/;

const seconds = (s: number) => (s >= 120 ? `${Math.round(s / 60)} min` : `${Math.round(s)} s`);

function maxTopicLag(report: LagReport, group: RegExp, topic?: RegExp): number {
  let max = 0;
  for (const g of report.groups) {
    if (!group.test(g.group)) continue;
    for (const p of g.partitions) if (!topic || topic.test(p.topic)) max = Math.max(max, p.lagSeconds);
  }
  return max;
}

function lagAlerts(report: LagReport | undefined): ActiveAlert[] {
  if (!report) return [{ alert: 'SluiceLagMonitorAbsent', severity: 'warning', summary: 'No Sluice instance exports consumer lag (no lag monitor report in Redis)' }];
  const out: ActiveAlert[] = [];
  const interactive = maxTopicLag(report, PROCESSOR_GROUP, INTERACTIVE_TOPIC);
  if (interactive > 10) out.push({ alert: 'SluiceInteractiveLagHigh', severity: 'critical', summary: `Interactive runs wait ${seconds(interactive)} in Kafka before a processor reads them` });
  const batch = maxTopicLag(report, PROCESSOR_GROUP, BATCH_TOPIC);
  if (batch > 900) out.push({ alert: 'SluiceBatchLagHigh', severity: 'warning', summary: `Batch runs wait ${seconds(batch)} in Kafka before a processor reads them` });
  const sink = maxTopicLag(report, STATUS_SINK_GROUP);
  if (sink > 30) out.push({ alert: 'SluiceStatusSinkLagHigh', severity: 'warning', summary: `Run status reaches Postgres ${seconds(sink)} late` });
  for (const g of report.groups) {
    if ((g.status === 'STALL' || g.status === 'STOP') && !RETRY_FORWARDER_GROUP.test(g.group)) out.push({ alert: 'SluiceConsumerGroupStalled', severity: 'critical', summary: `Consumer group ${g.group} is stuck while its lag grows (${g.status})` });
    if (g.status === 'REWIND') out.push({ alert: 'SluiceConsumerGroupRewound', severity: 'info', summary: `Consumer group ${g.group} went back to an earlier offset` });
    if (g.members === 0 && BigInt(g.lagMessages) > 0n) out.push({ alert: 'SluiceConsumerGroupEmpty', severity: 'critical', summary: `No consumer in group ${g.group} while it has lag (${g.lagMessages} messages)` });
  }
  return out;
}

function admissionAlerts(now: Tally | undefined, before: Tally | undefined): ActiveAlert[] {
  if (!now || !before || now.at <= before.at) return [];
  const increase = increaseOver(before.admission, now.admission);
  const total = sumOf(increase);
  const perSec = total / ((now.at - before.at) / 1000);
  if (perSec <= 0.2) return [];
  const refused = (increase.deferred ?? 0) + (increase.rejected ?? 0);
  const rejected = increase.rejected ?? 0;
  const pct = (x: number) => `${Math.round((100 * x) / total)}%`;
  const out: ActiveAlert[] = [];
  if (refused / total > 0.1) out.push({ alert: 'SluiceAdmissionRefusing', severity: 'warning', summary: `Sluice refuses ${pct(refused)} of submissions` });
  if (rejected / total > 0.05) out.push({ alert: 'SluiceAdmissionRejecting', severity: 'critical', summary: `Sluice rejects ${pct(rejected)} of submissions with 503` });
  return out;
}

function counterAlerts(now: Tally | undefined, five: Tally | undefined, fifteen: Tally | undefined): ActiveAlert[] {
  if (!now) return [];
  const out: ActiveAlert[] = [];
  if (fifteen && now.leasesLost - fifteen.leasesLost > 0) out.push({ alert: 'SluicePermitLeaseLost', severity: 'warning', summary: 'Permit leases expired while their runs still ran' });
  if (five) {
    for (const [dependency, n] of Object.entries(increaseOver(five.retryBudgetExhausted, now.retryBudgetExhausted))) {
      if (n > 0) out.push({ alert: 'SluiceRetryBudgetExhausted', severity: 'warning', summary: `Retry budget of ${dependency} is spent` });
    }
  }
  if (fifteen) {
    for (const [reason, n] of Object.entries(increaseOver(fifteen.deadLetters, now.deadLetters))) {
      if (n > 10) out.push({ alert: 'SluiceDeadLettersGrowing', severity: 'warning', summary: `${n} records dead-lettered (${reason}) in 15 minutes` });
    }
  }
  return out;
}

const ORDER: Record<AlertSeverity, number> = { critical: 0, warning: 1, info: 2 };

/**
 * The alert rules' conditions that hold now, worst first. The same thresholds as the rules, but
 * seen at once: the rules also wait out their `for:` duration before firing, and see every
 * instance's counters where these see this instance's.
 */
export function activeAlerts(inputs: AlertInputs): ActiveAlert[] {
  const breakers = inputs.breakers
    .filter((b) => b.state !== 'closed')
    .map((b): ActiveAlert => ({ alert: 'SluiceBreakerOpen', severity: 'critical', summary: `Breaker of ${b.name} is ${b.state === 'open' ? 'open' : 'half-open'}` }));
  return [...lagAlerts(inputs.lag), ...admissionAlerts(inputs.now, inputs.fiveMinutesAgo), ...breakers, ...counterAlerts(inputs.now, inputs.fiveMinutesAgo, inputs.fifteenMinutesAgo)].sort((a, b) => ORDER[a.severity] - ORDER[b.severity]);
}
