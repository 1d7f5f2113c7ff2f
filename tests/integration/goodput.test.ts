import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sample } from '../support/metric-value.js';
import { ADMIN_KEY, TENANT_C_KEY, eventually, freePort, http, scrapeMetrics, startSluice, testNamespace, waitForStatus, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * Provider calls spent on a run that then fails are waste: a support-reply run whose first LLM
 * call is answered and whose second keeps failing (tenant-c takes no stand-in answers) counts
 * every LLM call it made, over all its attempts through the retry topic, the answered one included.
 */
describe('wasted provider calls', () => {
  const namespace = testNamespace('goodput');
  let sluice: SluiceProcess;
  let api: string;
  let sim: string;
  const admin = (path: string, init: Parameters<typeof http>[1] = {}) => http(`${sim}${path}`, { key: ADMIN_KEY, ...init });

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    // A breaker that never opens: the failing calls keep going out, and the run ends failed, not waiting for it.
    const configPath = writeTestConfig({
      api: { port: apiPort },
      simulator: { port: simPort, anthropicLatencyMs: 20, anthropicJitterMs: 0 },
      dependencies: { anthropic: { breaker: { minimumCalls: 1_000, failureThreshold: 1_000 } } },
      processor: { runRetry: { baseMs: 100, capMs: 200 } },
    });
    sluice = await startSluice({ configPath, roles: 'provider-sim,status-sink,processor,api', namespace });
    api = `http://127.0.0.1:${apiPort}`;
    sim = `http://127.0.0.1:${simPort}`;
  });

  afterAll(async () => {
    await admin('/admin/faults', { method: 'DELETE' }).catch(() => undefined);
    await sluice?.stop();
  });

  it('counts the first, answered LLM call of a run that fails at its second as wasted, with every retry of the second', async () => {
    await admin('/admin/stats/reset', { method: 'POST' });
    // A slow order lookup between the two LLM steps: the window in which the provider starts failing.
    expect((await admin('/admin/faults', { method: 'PUT', json: { target: 'order-lookup', latencyMs: 1_500 } })).status).toBe(200);
    const submitted = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_C_KEY, json: { workflow: 'support-reply', input: { orderId: '7' }, deadlineMs: 60_000 } });
    expect(submitted.status).toBe(202);
    const runId = submitted.body.runId as string;
    await eventually(async () => ((await admin('/admin/stats')).body.calls.anthropic === 1 ? true : undefined), 10_000, 'the first LLM call answered');
    expect((await admin('/admin/faults', { method: 'PUT', json: { target: 'anthropic', errorStatus: 500, errorRate: 1 } })).status).toBe(200);

    const done = await waitForStatus(api, runId, TENANT_C_KEY, ['completed', 'failed', 'expired', 'dead_lettered'], 45_000);
    expect(done.status).toMatch(/^(failed|dead_lettered)$/);
    expect(done.error).toMatchObject({ code: 'dependency_unavailable' });
    expect(done.attempts).toBeGreaterThan(1);
    const stats = (await admin('/admin/stats')).body;
    expect(stats.calls.anthropic).toBeGreaterThan(2);
    expect(stats.errors.anthropic).toBe(stats.calls.anthropic - 1);
    const text = await (await scrapeMetrics(api)).text();
    expect(sample(text, 'sluice_provider_calls_wasted_total{dependency="anthropic",reason="failed"}')).toBe(stats.calls.anthropic);
    // The tool is not rate limited: its calls are nobody else's loss.
    expect(sample(text, 'sluice_provider_calls_wasted_total{dependency="order-lookup",reason="failed"}')).toBeUndefined();
    expect(sample(text, 'sluice_runs_on_time_total{tenant="tenant-c",workflow="support-reply",class="interactive"}')).toBeUndefined();
  }, 90_000);
});
