import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { ALERT_RULES, NOT_IN_CONSOLE, matches, type AlertRule } from '../../../src/api/console/alert-rules.js';
import { packageRoot } from '../../../src/util/package-root.js';

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: { severity?: string };
}

const rulesDir = join(packageRoot(), 'ops', 'prometheus', 'rules');
const rules = ['sluice-alerts.yml', 'sluice-recording.yml'].flatMap((f) => (parse(readFileSync(join(rulesDir, f), 'utf8')) as { groups: { rules: Rule[] }[] }).groups.flatMap((g) => g.rules));
const alerts = rules.filter((r): r is Rule & { alert: string } => r.alert !== undefined);
const recordings = rules.filter((r): r is Rule & { record: string } => r.record !== undefined);

/** The numbers an expression compares with, in order (`> 0.1`, `== 2`). */
const compared = (expr: string) => [...expr.matchAll(/(?:==|!=|>=|<=|>|<)\s*(-?\d+(?:\.\d+)?)/g)].map((m) => Number(m[1]));
/** Its label matchers, each once. */
const matchersOf = (expr: string) => [...new Set([...expr.matchAll(/([a-z_]+)\s*(=~|!~|!=|=)\s*"([^"]*)"/g)].map((m) => JSON.stringify([m[1], m[2], m[3]])))].map((m) => JSON.parse(m) as string[]);
/** Its range windows, with the recording rules it reads expanded. */
const windowsOf = (expr: string) => {
  let expanded = expr;
  for (const r of recordings) expanded = expanded.split(r.record).join(`(${r.expr})`);
  return [...new Set([...expanded.matchAll(/\[(\d+[smh])\]/g)].map((m) => m[1]))];
};

describe("the console's alert rules and ops/prometheus/rules/sluice-alerts.yml", () => {
  it('name the same rules: each rule of the file is evaluated by the console or listed as not, with why', () => {
    expect(alerts.length).toBeGreaterThan(0);
    expect(alerts.map((a) => a.alert).sort()).toEqual([...Object.keys(ALERT_RULES), ...Object.keys(NOT_IN_CONSOLE)].sort());
  });

  for (const [name, rule] of Object.entries(ALERT_RULES) as [string, AlertRule][]) {
    it(`${name}: the same severity, for:, thresholds, label matchers and windows`, () => {
      const file = alerts.find((a) => a.alert === name)!;
      expect({ severity: rule.severity, for: rule.for, thresholds: rule.thresholds, matchers: rule.matchers, windows: rule.windows }).toEqual({
        severity: file.labels?.severity,
        for: file.for,
        thresholds: compared(file.expr),
        matchers: matchersOf(file.expr),
        windows: windowsOf(file.expr),
      });
    });
  }

  it("match label values anchored, as PromQL's matchers do", () => {
    expect(matches('SluiceInteractiveLagHigh', 'group', 't-x.sluice.processor')).toBe(true);
    expect(matches('SluiceInteractiveLagHigh', 'group', 'sluice.processor.reader')).toBe(false);
    expect(matches('SluiceInteractiveLagHigh', 'topic', 'sluice.runs.batch')).toBe(false);
    expect(matches('SluiceConsumerGroupStalled', 'group', 'ns.sluice.retry-forwarder')).toBe(false);
    expect(matches('SluiceConsumerGroupStalled', 'group', 'ns.sluice.processor')).toBe(true);
    expect(matches('SluiceAdmissionRejecting', 'outcome', 'deferred')).toBe(false);
    // A label the rule does not match on passes.
    expect(matches('SluiceBreakerOpen', 'group', 'anything')).toBe(true);
  });
});
