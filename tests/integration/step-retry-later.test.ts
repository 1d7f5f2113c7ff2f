import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sample } from '../support/metric-value.js';
import { scrapeMetrics, ADMIN_KEY, TENANT_A_KEY, eventually, freePort, http, startSluice, testNamespace, waitForStatus, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * A provider that answers 429 with a long retry-after: the step is not retried by waiting in the
 * processor, which would hold the run's permits and slot; the run leaves through the retry topic
 * and holds nothing until it is due.
 */
describe('a step retry timed by retry-after goes through the retry topic', () => {
  const namespace = testNamespace('retry-later');
  let sluice: SluiceProcess;
  let api: string;
  let sim: string;
  const admin = (path: string, init: Parameters<typeof http>[1] = {}) => http(`${sim}${path}`, { key: ADMIN_KEY, ...init });

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    const configPath = writeTestConfig({ api: { port: apiPort }, simulator: { port: simPort, anthropicLatencyMs: 50, anthropicJitterMs: 0 } });
    sluice = await startSluice({ configPath, roles: 'provider-sim,status-sink,processor,api', namespace });
    api = `http://127.0.0.1:${apiPort}`;
    sim = `http://127.0.0.1:${simPort}`;
  });

  afterAll(async () => {
    await admin('/admin/faults', { method: 'DELETE' }).catch(() => undefined);
    await sluice?.stop();
  });

  it('holds no permit while the run waits out the retry-after, makes one call, and completes once the provider answers', async () => {
    await admin('/admin/stats/reset', { method: 'POST' });
    expect((await admin('/admin/faults', { method: 'PUT', json: { target: 'anthropic', errorStatus: 429, errorRate: 1, retryAfterSec: 4 } })).status).toBe(200);
    const submitted = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow: 'support-reply', input: { orderId: '9' }, deadlineMs: 60_000 } });
    expect(submitted.status).toBe(202);
    const runId = submitted.body.runId as string;

    const waiting = await waitForStatus(api, runId, TENANT_A_KEY, ['waiting_dependency']);
    expect(waiting.statusMessage).toMatch(/^anthropic failed .*429.*; attempt 2 at /);
    const scrape = await eventually(
      async () => {
        const text = await (await scrapeMetrics(api)).text();
        const held = ['global', 'tenant:tenant-a', 'workflow:support-reply', 'dependency:anthropic'].map((scope) => sample(text, `sluice_permits_in_use{scope="${scope}"}`));
        return held.every((n) => n === 0) ? held : undefined;
      },
      2_000,
      'no permit held while the run waits',
    );
    expect(scrape).toEqual([0, 0, 0, 0]);
    expect((await admin('/admin/stats')).body.calls.anthropic).toBe(1);

    await admin('/admin/faults', { method: 'DELETE' });
    const done = await waitForStatus(api, runId, TENANT_A_KEY, ['completed', 'failed', 'expired', 'dead_lettered'], 30_000);
    expect(done).toMatchObject({ status: 'completed', attempts: 2 });
    expect(done.result).toMatchObject({ degraded: false });
    // Not before the provider's retry-after: the second attempt's first call came at least 4 s after the first.
    expect(Date.parse(done.finishedAt) - Date.parse(waiting.startedAt)).toBeGreaterThanOrEqual(4_000);
  }, 60_000);
});
