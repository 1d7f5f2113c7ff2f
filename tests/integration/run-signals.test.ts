import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sample } from '../support/metric-value.js';
import { scrapeMetrics, TENANT_A_KEY, freePort, http, startSluice, testNamespace, waitForStatus, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * The signals measured against a run's admission, the HTTP outcome classes, the token and cost
 * counters on a real scrape, and the run's usage as GET shows it: one process with every role,
 * one completed run, one refused submission.
 */
describe('run signals on /metrics after a completed run', () => {
  let sluice: SluiceProcess;
  let api: string;
  let text: string;
  let done: Record<string, any>;

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    sluice = await startSluice({
      configPath: writeTestConfig({ api: { port: apiPort }, simulator: { port: simPort } }),
      roles: 'provider-sim,status-sink,processor,api',
      namespace: testNamespace('signals'),
    });
    api = `http://127.0.0.1:${apiPort}`;
    const submitted = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow: 'support-reply', input: { message: 'Where is order 42?', orderId: '42' } } });
    expect(submitted.status).toBe(202);
    done = await waitForStatus(api, submitted.body.runId, TENANT_A_KEY, ['completed', 'failed', 'expired', 'cancelled'], 30_000);
    expect(done.status).toBe('completed');
    const refused = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow: 'no-such-flow', input: {} } });
    expect(refused.status).toBe(400);
    text = await scrapeMetrics(api).then((r) => r.text());
  });

  afterAll(async () => {
    expect(await sluice?.stop()).toBe(0);
  });

  it('times the run from its admission: waiting, first output and end, each observed once', () => {
    const count = (series: string) => sample(text, series.replace('{', '_count{'));
    const sum = (series: string) => sample(text, series.replace('{', '_sum{'))!;
    expect(count('sluice_run_wait_since_admission_seconds{class="interactive"}')).toBe(1);
    expect(count('sluice_run_first_output_seconds{class="interactive"}')).toBe(1);
    expect(count('sluice_run_end_to_end_seconds{class="interactive",status="completed"}')).toBe(1);
    const [waited, firstOutput, end] = [sum('sluice_run_wait_since_admission_seconds{class="interactive"}'), sum('sluice_run_first_output_seconds{class="interactive"}'), sum('sluice_run_end_to_end_seconds{class="interactive",status="completed"}')];
    expect(firstOutput).toBeGreaterThan(0);
    expect(waited).toBeLessThanOrEqual(firstOutput);
    expect(firstOutput).toBeLessThanOrEqual(end);
    expect(text).not.toMatch(/^sluice_run_end_to_end_seconds_count\{[^}]*status="(failed|expired|cancelled)"/m);
  });

  it('labels submissions by outcome: the admitted one apart from the refused one', () => {
    expect(sample(text, 'sluice_http_requests_total{route="/v1/runs",method="POST",status="202",outcome="admitted"}')).toBe(1);
    expect(sample(text, 'sluice_http_requests_total{route="/v1/runs",method="POST",status="400",outcome="error"}')).toBe(1);
    expect(sample(text, 'sluice_http_request_duration_seconds_count{route="/v1/runs",method="POST",outcome="admitted"}')).toBe(1);
    expect(sample(text, 'sluice_http_request_duration_seconds_count{route="/v1/runs",method="POST",outcome="error"}')).toBe(1);
    expect(sample(text, 'sluice_http_request_duration_seconds_count{route="/v1/runs/:id",method="GET",outcome="other"}')).toBeGreaterThanOrEqual(1);
  });

  it('counts the simulated LLM answers\' tokens per tenant, workflow, configured model and kind', () => {
    const tokens = (kind: string) => sample(text, `sluice_llm_tokens_total{tenant="tenant-a",workflow="support-reply",model="claude-sonnet-4-6",kind="${kind}"}`);
    expect(tokens('input')).toBeGreaterThan(0);
    expect(tokens('output')).toBeGreaterThan(0);
    // The simulator caches nothing, as the API reports a request without cache breakpoints.
    expect(tokens('cache_read')).toBe(0);
    expect(tokens('cache_creation')).toBe(0);
  });

  it('prices the answers by the built-in pricing, and the run\'s usage on GET agrees with the counters', () => {
    const labels = 'tenant="tenant-a",workflow="support-reply",model="claude-sonnet-4-6"';
    const tokens = (kind: string) => sample(text, `sluice_llm_tokens_total{${labels},kind="${kind}"}`)!;
    const cost = sample(text, `sluice_llm_cost_usd_total{${labels}}`)!;
    // claude-sonnet-4 in config/local.yaml: $3 input, $15 output per million tokens.
    expect(cost).toBeCloseTo((tokens('input') * 3 + tokens('output') * 15) / 1e6, 12);
    expect(text).not.toMatch(/^sluice_llm_unpriced_tokens_total\{/m);
    expect(done.usage).toMatchObject({ inputTokens: tokens('input'), outputTokens: tokens('output'), cacheCreationInputTokens: 0, cacheReadInputTokens: 0, llmCalls: 2 });
    expect(done.usage.costUsd).toBeCloseTo(cost, 8);
    expect(Object.keys(done.usage.byModel)).toEqual(['claude-sonnet-4-6']);
    expect(done.result.usage).toEqual(done.usage);
  });
});
