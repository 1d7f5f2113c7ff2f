import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { runCommand } from '../../../src/dev/infra/process.js';
import { ensurePromtool, PROMTOOL_FETCH_BOUND_MS } from '../../../src/dev/infra/promtool.js';
import { exportedMetricNames } from './exported-metrics.js';
import { promqlProblems } from './promql.js';

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface ExpAlert {
  exp_labels?: Record<string, string>;
  exp_annotations?: Record<string, string>;
}
interface RuleTestFile {
  rule_files: string[];
  group_eval_order?: string[];
  tests: { name: string; alert_rule_test?: { eval_time: string; alertname: string; exp_alerts?: ExpAlert[] }[] }[];
}

const RULES_DIR = 'ops/prometheus/rules';
const TESTS_DIR = 'ops/prometheus/tests';
const yamlFiles = (dir: string) => readdirSync(dir).filter((f) => f.endsWith('.yml')).map((f) => join(dir, f));
const groups = yamlFiles(RULES_DIR).flatMap((f) => (parse(readFileSync(f, 'utf8')) as { groups: { name: string; rules: Rule[] }[] }).groups);
const rules: Rule[] = groups.flatMap((g) => g.rules);
const alerts = rules.filter((r): r is Rule & { alert: string } => r.alert !== undefined);
const testFiles = yamlFiles(TESTS_DIR).map((path) => ({ path, content: parse(readFileSync(path, 'utf8')) as RuleTestFile }));
const cases = testFiles.flatMap((f) => f.content.tests.flatMap((t) => (t.alert_rule_test ?? []).map((c) => ({ ...c, test: t.name }))));
const minutes = (d: string) => Number(/^(\d+)m$/.exec(d)?.[1] ?? Number.NaN);

let promtool: string;
beforeAll(async () => {
  try {
    promtool = await ensurePromtool();
  } catch (err) {
    throw new Error(`promtool is needed to test Sluice's alert rules and could not be had: ${(err as Error).message}`);
  }
}, PROMTOOL_FETCH_BOUND_MS);

async function runPromtool(args: string[]): Promise<void> {
  const { code, output } = await runCommand(promtool, args, { timeoutMs: 60_000 });
  expect(code, `promtool ${args.join(' ')}:\n${output}`).toBe(0);
}

/**
 * The test files as promtool reads them, with each expected alert's runbook (a fixed text, kept
 * once, in the rule) added to its expected annotations, and the rule files' paths made absolute.
 * Recording groups are evaluated before the alerting groups, so an alert sees the aggregate of
 * the same evaluation: Prometheus evaluates groups independently, so there an alert may see it
 * one evaluation interval late, which the `for:` durations dwarf.
 */
function expandedTestFiles(dir: string): string[] {
  const runbooks = new Map(alerts.map((a) => [a.alert, a.annotations?.runbook]));
  return testFiles.map(({ path, content }) => {
    const expanded = structuredClone(content);
    expanded.rule_files = content.rule_files.map((f) => resolve(TESTS_DIR, f));
    const recording = (g: (typeof groups)[number]) => g.rules.some((r) => r.record !== undefined);
    expanded.group_eval_order = [...groups.filter(recording), ...groups.filter((g) => !recording(g))].map((g) => g.name);
    for (const c of expanded.tests.flatMap((t) => t.alert_rule_test ?? [])) {
      for (const a of c.exp_alerts ?? []) a.exp_annotations = { ...a.exp_annotations, runbook: runbooks.get(c.alertname) ?? '' };
    }
    const out = join(dir, basename(path));
    writeFileSync(out, stringify(expanded));
    return out;
  });
}

describe('Sluice alert rules (ops/prometheus/rules)', () => {
  it('are valid, and prometheus.yml loads all of them (promtool check config, check rules)', async () => {
    expect(alerts.length).toBeGreaterThan(0);
    await runPromtool(['check', 'config', 'ops/prometheus/prometheus.yml']);
    await runPromtool(['check', 'rules', ...yamlFiles(RULES_DIR)]);
    const prom = parse(readFileSync('ops/prometheus/prometheus.yml', 'utf8')) as { rule_files: string[] };
    expect(prom.rule_files).toEqual(['rules/*.yml']);
  });

  it('every alert has a severity, a summary and description showing what fired, and a runbook: what it means, what to look at, what to do', () => {
    for (const a of alerts) {
      expect(['critical', 'warning', 'info'], a.alert).toContain(a.labels?.severity);
      expect(a.annotations?.summary, a.alert).toBeTruthy();
      expect(a.annotations?.description, a.alert).toBeTruthy();
      // An alert on something absent has no value or label to show.
      if (!a.expr.startsWith('absent(')) expect(`${a.annotations?.summary} ${a.annotations?.description}`, `${a.alert}: summary or description shows a value or label`).toMatch(/\{\{ .*\$(value|labels)/);
      expect(a.annotations?.runbook, a.alert).toMatch(/^Means: .+ Look at: .+ Do: .+/s);
      // Runbooks are added to the promtool cases' expected annotations verbatim.
      expect(a.annotations?.runbook, a.alert).not.toContain('{{');
    }
  });

  it('every alert has a promtool case where it fires and one where it does not; one with `for:` is seen pending first', () => {
    for (const a of alerts) {
      const own = cases.filter((c) => c.alertname === a.alert);
      const firing = own.filter((c) => (c.exp_alerts ?? []).length > 0);
      const quiet = own.filter((c) => (c.exp_alerts ?? []).length === 0);
      expect(firing.length, `${a.alert} fires in no case`).toBeGreaterThan(0);
      expect(quiet.length, `${a.alert} is never expected quiet`).toBeGreaterThan(0);
      if (a.for) {
        const pendingThenFiring = firing.some((f) => quiet.some((q) => q.test === f.test && minutes(q.eval_time) < minutes(f.eval_time)));
        expect(pendingThenFiring, `${a.alert} (for: ${a.for}) has no case quiet before it fires in the same series`).toBe(true);
      }
    }
    const known = new Set(alerts.map((a) => a.alert));
    for (const c of cases) expect(known, `case "${c.test}" names an unknown alert`).toContain(c.alertname);
  });

  it('behave as their cases say (promtool test rules)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-rule-tests-'));
    try {
      await runPromtool(['test', 'rules', ...expandedTestFiles(dir)]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('name only metrics Sluice exports, with labels they carry, or recording rules', async () => {
    const exported = await exportedMetricNames();
    const recorded = new Set(rules.flatMap((r) => (r.record ? [r.record] : [])));
    for (const r of rules) expect(promqlProblems(r.expr, exported, recorded), r.alert ?? r.record).toEqual([]);
  });
});
