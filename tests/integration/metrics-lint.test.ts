import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensurePromtool, PROMTOOL_FETCH_BOUND_MS } from '../../src/dev/infra/promtool.js';
import { ADMIN_KEY, TENANT_A_KEY, TENANT_B_KEY, freePort, http, startSluice, testNamespace, waitForStatus, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * What Prometheus gets from a running Sluice passes `promtool check metrics` (names, suffixes,
 * types, help): every role in one process, after runs of both classes went through, so the
 * histograms and labelled series have samples. The API port answers it to the admin key only; the
 * ops port, which this process with the API role serves too, to anyone.
 */
describe('/metrics of a running Sluice', () => {
  let sluice: SluiceProcess;
  let api: string;
  let ops: string;
  let promtool: string;

  beforeAll(async () => {
    promtool = await ensurePromtool().catch((err: Error) => {
      throw new Error(`promtool is needed to lint Sluice's metrics and could not be had: ${err.message}`);
    });
    const [apiPort, simPort, opsPort] = [await freePort(), await freePort(), await freePort()];
    sluice = await startSluice({
      configPath: writeTestConfig({ api: { port: apiPort }, simulator: { port: simPort } }),
      roles: 'provider-sim,status-sink,dlq-sink,processor,lag-monitor,api',
      namespace: testNamespace('metrics-lint'),
      env: { SLUICE_OPS_PORT: String(opsPort) },
    });
    api = `http://127.0.0.1:${apiPort}`;
    ops = `http://127.0.0.1:${opsPort}`;
  }, PROMTOOL_FETCH_BOUND_MS);

  afterAll(async () => {
    expect(await sluice?.stop()).toBe(0);
  });

  it('passes promtool check metrics', async () => {
    for (const [key, workflow, input] of [[TENANT_A_KEY, 'support-reply', { message: 'hi', orderId: '42' }], [TENANT_B_KEY, 'report-digest', { request: 'weekly' }]] as const) {
      const submitted = await http(`${api}/v1/runs`, { method: 'POST', key, json: { workflow, input } });
      expect(submitted.status).toBe(202);
      expect((await waitForStatus(api, submitted.body.runId, key, ['completed', 'failed', 'expired'], 30_000)).status).toBe('completed');
    }
    const scrape = await http(`${api}/metrics`, { key: ADMIN_KEY });
    expect(scrape.status).toBe(200);
    expect(scrape.body).toContain('sluice_runs_finished_total{');
    expect(scrape.body).toMatch(/^sluice_consumer_lag_seconds\{/m);
    const lint = spawnSync(promtool, ['check', 'metrics'], { input: scrape.body, encoding: 'utf8', timeout: 60_000 });
    expect(lint.status, `promtool check metrics:\n${lint.stdout}${lint.stderr}`).toBe(0);
  });

  it("shows tenants' volumes on the API port only to the admin key, and on the ops port without credentials", async () => {
    expect((await http(`${api}/metrics`)).status).toBe(401);
    expect((await http(`${api}/metrics`, { key: TENANT_A_KEY })).status).toBe(403);
    const open = await http(`${ops}/metrics`);
    expect(open.status).toBe(200);
    expect(open.body).toContain('sluice_admission_total{tenant="tenant-a"');
    expect((await http(`${ops}/readyz`)).status).toBe(200);
    // The ops port serves health and metrics, nothing of the API.
    expect((await http(`${ops}/v1/admin/limits`, { key: ADMIN_KEY })).status).toBe(404);
  });
});
