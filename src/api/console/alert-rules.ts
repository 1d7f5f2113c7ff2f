/**
 * The parameters of Sluice's alert rules (ops/prometheus/rules/sluice-alerts.yml) as the console's
 * banner evaluates them: severity, `for:` duration, the numbers each rule's expression compares
 * against (in the order they appear in it), its label matchers and its range windows.
 * tests/unit/api/console-alert-rules.test.ts reads the rules file and checks that every rule is
 * either here with exactly these values or in NOT_IN_CONSOLE, so a threshold changed in one place
 * and not the other fails the tests.
 */

export type AlertSeverity = 'critical' | 'warning' | 'info';

/** A label matcher as PromQL writes it: `label="v"`, `label=~"re"`, `label!~"re"`. */
export type Matcher = readonly [label: string, op: '=' | '=~' | '!~', value: string];

export interface AlertRule {
  severity: AlertSeverity;
  /** The rule's `for:`; absent: it fires on the first evaluation its condition holds. */
  for?: string;
  /** The numbers the expression compares with, in the order they appear in it. */
  thresholds: readonly number[];
  matchers: readonly Matcher[];
  /** Range windows (`[10m]`) of the expression, recording rules it uses included. */
  windows: readonly string[];
}

const PROCESSOR_GROUP: Matcher = ['group', '=~', '.*sluice[.]processor'];

export const ALERT_RULES = {
  SluiceInteractiveLagHigh: { severity: 'critical', for: '2m', thresholds: [10], matchers: [PROCESSOR_GROUP, ['topic', '=~', '.*sluice[.]runs[.]interactive']], windows: [] },
  SluiceBatchLagHigh: { severity: 'warning', for: '10m', thresholds: [900], matchers: [PROCESSOR_GROUP, ['topic', '=~', '.*sluice[.]runs[.]batch']], windows: [] },
  SluiceStatusSinkLagHigh: { severity: 'warning', for: '5m', thresholds: [30], matchers: [['group', '=~', '.*sluice[.]status-sink']], windows: [] },
  /** Status code STALL (2) or STOP (3), and the group's lag grew (> 0) over the window. */
  SluiceConsumerGroupStalled: { severity: 'critical', for: '5m', thresholds: [2, 3, 0], matchers: [['group', '!~', '.*sluice[.]retry-forwarder']], windows: ['10m'] },
  /** Status code REWIND (4). */
  SluiceConsumerGroupRewound: { severity: 'info', thresholds: [4], matchers: [], windows: [] },
  /** 0 members, and lag over 0. */
  SluiceConsumerGroupEmpty: { severity: 'critical', for: '2m', thresholds: [0, 0], matchers: [], windows: [] },
  /** The active monitor (== 1) reports 0 members. */
  SluiceNoProcessors: { severity: 'warning', for: '5m', thresholds: [1, 0], matchers: [['group', '=~', '(.*[.])?sluice[.]processor']], windows: [] },
  SluiceLagMonitorAbsent: { severity: 'warning', for: '5m', thresholds: [1], matchers: [], windows: [] },
  /** Share refused over 0.1, with over 0.2 decisions a second. */
  SluiceAdmissionRefusing: { severity: 'warning', for: '5m', thresholds: [0.1, 0.2], matchers: [['outcome', '=~', 'deferred|rejected']], windows: ['5m'] },
  /** Share rejected over 0.05, with over 0.2 decisions a second. */
  SluiceAdmissionRejecting: { severity: 'critical', for: '5m', thresholds: [0.05, 0.2], matchers: [['outcome', '=', 'rejected']], windows: ['5m'] },
  SluiceTenantBacklogNearBound: { severity: 'warning', for: '5m', thresholds: [0.8], matchers: [], windows: [] },
  SluiceBacklogNearGlobalBound: { severity: 'critical', for: '5m', thresholds: [0.8], matchers: [], windows: [] },
  SluiceBreakerOpen: { severity: 'critical', for: '5m', thresholds: [0], matchers: [], windows: [] },
  SluicePermitLeaseLost: { severity: 'warning', thresholds: [0], matchers: [], windows: ['15m'] },
  SluiceRetryBudgetExhausted: { severity: 'warning', for: '5m', thresholds: [0], matchers: [], windows: ['5m'] },
  SluiceDeadLettersGrowing: { severity: 'warning', for: '5m', thresholds: [10], matchers: [], windows: ['15m'] },
} as const satisfies Record<string, AlertRule>;

export type AlertName = keyof typeof ALERT_RULES;

/** Rules of the file the console cannot evaluate, and why. */
export const NOT_IN_CONSOLE: Readonly<Record<string, string>> = {
  SluiceLagMonitorDuplicated: "it counts every instance's sluice_lag_monitor_active; the console sees only the one report the active monitor leaves in Redis",
};

/** A PromQL duration of whole seconds, minutes or hours (`30s`, `5m`, `1h`) in milliseconds. */
export function durationMs(d: string): number {
  const m = /^(\d+)([smh])$/.exec(d);
  if (!m) throw new Error(`not a duration this reads: ${d}`);
  return Number(m[1]) * { s: 1_000, m: 60_000, h: 3_600_000 }[m[2] as 's' | 'm' | 'h'];
}

export function forMs(name: AlertName): number {
  const rule: AlertRule = ALERT_RULES[name];
  return rule.for === undefined ? 0 : durationMs(rule.for);
}

/** Whether a label value passes a rule's matchers on that label (anchored, as PromQL's are). */
export function matches(name: AlertName, label: string, value: string): boolean {
  const rule: AlertRule = ALERT_RULES[name];
  return rule.matchers.every(([l, op, v]) => {
    if (l !== label) return true;
    if (op === '=') return value === v;
    const hit = new RegExp(`^(?:${v})$`).test(value);
    return op === '=~' ? hit : !hit;
  });
}

/** The range window of a rule that has one, in milliseconds. */
export function windowMs(name: AlertName): number {
  const rule: AlertRule = ALERT_RULES[name];
  const [w] = rule.windows;
  if (w === undefined) throw new Error(`${name} has no range window`);
  return durationMs(w);
}
