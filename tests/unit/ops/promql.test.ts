import { describe, expect, it } from 'vitest';
import { parsePromql, promqlProblems } from './promql.js';

/** The checker the rule and dashboard tests rely on must itself catch what it claims to. */
describe('promqlProblems', () => {
  const exported = new Map([
    ['sluice_a_total', new Set(['tenant', 'job', 'instance'])],
    ['sluice_b_seconds_bucket', new Set(['class', 'le'])],
  ]);
  const recorded = new Set(['tenant:sluice_a:rate5m']);

  it('accepts exported metrics, their labels, recording rules and Grafana interval variables', () => {
    expect(promqlProblems('sum by (tenant) (rate(sluice_a_total{tenant=~"$tenant"}[$__rate_interval]))', exported, recorded)).toEqual([]);
    expect(promqlProblems('histogram_quantile(0.95, sum by (le, class) (rate(sluice_b_seconds_bucket[${__interval}])))', exported, recorded)).toEqual([]);
    expect(promqlProblems('tenant:sluice_a:rate5m > 0 and on () absent(sluice_a_total == 1)', exported, recorded)).toEqual([]);
  });

  it('reports unknown metrics, labels a metric lacks, nameless selectors and syntax errors', () => {
    expect(promqlProblems('rate(sluice_c_total[5m])', exported, recorded)).toEqual(['sluice_c_total is not a metric Sluice exports']);
    expect(promqlProblems('sluice_a_total{class="x"}', exported, recorded)).toEqual(['sluice_a_total has no label class']);
    expect(promqlProblems('{tenant="x"}', exported, recorded)).toEqual(['a selector without a metric name']);
    expect(promqlProblems('sum(rate(sluice_a_total[5m])', exported, recorded)[0]).toMatch(/^syntax error/);
    expect(promqlProblems('rate(sluice_a_total[$window])', exported, recorded)[0]).toMatch(/^syntax error/);
  });

  it('reads the metric name from __name__ and from the quoted-name syntax', () => {
    expect(parsePromql('{__name__="sluice_a_total", tenant="x"}').selectors).toEqual([{ metric: 'sluice_a_total', labels: ['tenant'] }]);
    expect(parsePromql('{"sluice_a_total", "tenant"="x"}').selectors).toEqual([{ metric: 'sluice_a_total', labels: ['tenant'] }]);
  });
});
