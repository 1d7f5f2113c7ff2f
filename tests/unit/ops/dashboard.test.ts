import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { exportedMetricNames } from './exported-metrics.js';
import { parsePromql, promqlProblems } from './promql.js';

interface Target {
  expr?: string;
  datasource?: { type?: string; uid?: string };
}
interface Panel {
  id: number;
  type: string;
  title: string;
  datasource?: { type?: string; uid?: string };
  fieldConfig?: { defaults?: { unit?: string } };
  targets?: Target[];
  panels?: Panel[];
}
interface Variable {
  name: string;
  type: string;
  query?: string | { query?: string };
  datasource?: { type?: string; uid?: string };
}
interface Dashboard {
  uid: string;
  panels: Panel[];
  templating: { list: Variable[] };
}

const DASHBOARDS_DIR = 'ops/grafana/dashboards';
const dashboards = readdirSync(DASHBOARDS_DIR)
  .filter((f) => f.endsWith('.json'))
  .map((f) => ({ file: f, dashboard: JSON.parse(readFileSync(join(DASHBOARDS_DIR, f), 'utf8')) as Dashboard }));
const USES_VARIABLE = { type: 'prometheus', uid: '${datasource}' };
/** Every panel, rows' collapsed panels included; rows themselves hold no query. */
const queryPanels = (d: Dashboard): Panel[] => d.panels.flatMap((p) => (p.type === 'row' ? (p.panels ?? []) : [p]));
const recorded = new Set(
  readdirSync('ops/prometheus/rules')
    .filter((f) => f.endsWith('.yml'))
    .flatMap((f) => (parse(readFileSync(join('ops/prometheus/rules', f), 'utf8')) as { groups: { rules: { record?: string }[] }[] }).groups)
    .flatMap((g) => g.rules.flatMap((r) => (r.record ? [r.record] : []))),
);

describe('Grafana dashboards (ops/grafana/dashboards)', () => {
  it('exist, with unique uids and panel ids', () => {
    expect(dashboards.map((d) => d.file)).toContain('sluice.json');
    expect(new Set(dashboards.map((d) => d.dashboard.uid)).size).toBe(dashboards.length);
    for (const { file, dashboard } of dashboards) {
      const ids = [...dashboard.panels, ...dashboard.panels.flatMap((p) => p.panels ?? [])].map((p) => p.id);
      expect(new Set(ids).size, file).toBe(ids.length);
    }
  });

  it('have a Prometheus datasource variable, used by every panel, query and variable query', () => {
    for (const { file, dashboard } of dashboards) {
      expect(dashboard.templating.list.find((v) => v.name === 'datasource'), file).toMatchObject({ type: 'datasource', query: 'prometheus' });
      for (const v of dashboard.templating.list.filter((v) => v.type === 'query')) expect(v.datasource, `${file}: variable ${v.name}`).toEqual(USES_VARIABLE);
      for (const p of queryPanels(dashboard)) {
        expect(p.datasource, `${file}: ${p.title}`).toEqual(USES_VARIABLE);
        for (const t of p.targets ?? []) expect(t.datasource ?? USES_VARIABLE, `${file}: ${p.title}`).toEqual(USES_VARIABLE);
      }
    }
  });

  it('every panel has a unit and at least one query', () => {
    for (const { file, dashboard } of dashboards) {
      for (const p of queryPanels(dashboard)) {
        expect(p.fieldConfig?.defaults?.unit, `${file}: ${p.title}`).toMatch(/\S/);
        expect(p.targets?.length, `${file}: ${p.title}`).toBeGreaterThan(0);
        for (const t of p.targets!) expect(t.expr, `${file}: ${p.title}`).toMatch(/\S/);
      }
    }
  });

  it('every query parses as PromQL and names only metrics Sluice exports, with labels they carry, or recording rules', async () => {
    const exported = await exportedMetricNames();
    for (const { file, dashboard } of dashboards) {
      for (const p of queryPanels(dashboard)) for (const t of p.targets ?? []) expect(promqlProblems(t.expr!, exported, recorded), `${file}: ${p.title}: ${t.expr}`).toEqual([]);
      for (const v of dashboard.templating.list.filter((v) => v.type === 'query')) {
        const query = typeof v.query === 'string' ? v.query : v.query?.query;
        const m = /^label_values\((.+),\s*(\w+)\)$/.exec(query ?? '');
        expect(m, `${file}: variable ${v.name}: ${query}`).not.toBeNull();
        expect(promqlProblems(m![1]!, exported, recorded), `${file}: variable ${v.name}`).toEqual([]);
        expect(exported.get(parsePromql(m![1]!).selectors[0]!.metric!), `${file}: variable ${v.name}`).toContain(m![2]);
      }
    }
  });

  it('the overview shows what the issue asks for: lag, admission, backlog vs bound, permits, breakers, held runs, retries and DLQ, latency by class, tokens', () => {
    const sluice = dashboards.find((d) => d.file === 'sluice.json')!.dashboard;
    const shown = new Set(queryPanels(sluice).flatMap((p) => (p.targets ?? []).flatMap((t) => parsePromql(t.expr!).selectors.map((s) => s.metric))));
    const wanted = [
      'sluice_consumer_lag_messages',
      'sluice_consumer_lag_seconds',
      'group_topic:sluice_consumer_lag_messages:sum',
      'group_topic:sluice_consumer_lag_seconds:max',
      'sluice_admission_total',
      'tenant:sluice_admission_backlog_runs:sum',
      'sluice_admission_backlog_limit',
      'sluice_admission_backlog_global_limit',
      'scope:sluice_permits_in_use:max',
      'scope:sluice_permit_limit:max',
      'dependency:sluice_breaker_state:max',
      'sluice_processor_runs_held',
      'sluice_run_retries_total',
      'sluice_dead_letters_total',
      'sluice_run_first_output_seconds_bucket',
      'sluice_run_end_to_end_seconds_bucket',
      'sluice_run_wait_since_admission_seconds_bucket',
      'sluice_llm_tokens_total',
    ];
    for (const metric of wanted) expect(shown, metric).toContain(metric);
  });
});
