import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_KEY, TENANT_A_KEY, TENANT_C_KEY, eventually, freePort, http, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * One partition, so the noisy and the quiet tenant share it: the noisy tenant's backlog waits at
 * its own cap without standing in front of the quiet tenant's runs (no head-of-line blocking).
 */
describe('a noisy tenant does not delay a quiet one in the same partition', () => {
  const namespace = testNamespace('fair');
  const procs: SluiceProcess[] = [];
  let api: string;

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    const bigBucket = { bucket: { capacity: 10_000, refillPerSec: 1_000 } };
    const configPath = writeTestConfig({
      api: { port: apiPort },
      simulator: { port: simPort, anthropicLatencyMs: 300, anthropicJitterMs: 0 },
      kafka: { partitions: { interactive: 1, batch: 1, status: 1 } },
      limits: { global: 8 },
      processor: { maxInFlight: 20, partitionBuffer: 200 },
      tenants: { 'tenant-a': { maxConcurrency: 2, admission: bigBucket }, 'tenant-c': { maxConcurrency: 2, admission: bigBucket } },
      dependencies: { anthropic: { maxConcurrency: 8 }, 'order-lookup': { maxConcurrency: 8 } },
    });
    procs.push(await startSluice({ configPath, roles: 'provider-sim,status-sink,api,processor', namespace }));
    api = `http://127.0.0.1:${apiPort}`;
    await http(`http://127.0.0.1:${simPort}/admin/faults`, { method: 'PUT', key: ADMIN_KEY, json: { target: 'order-lookup', latencyMs: 100 } });
  });

  afterAll(async () => {
    for (const p of procs) await p.stop();
  });

  const submit = (key: string, n: string) => http(`${api}/v1/runs`, { method: 'POST', key, json: { workflow: 'support-reply', input: { orderId: n }, deadlineMs: 300_000 } });
  const finished = (key: string, runId: string) =>
    eventually(
      async () => {
        const r = await http(`${api}/v1/runs/${runId}`, { key });
        return r.body?.status === 'completed' ? r.body : undefined;
      },
      120_000,
      `run ${runId} to complete`,
      100,
    );

  it('serves the quiet tenant within its own cap wait while the noisy one sends 20× its cap', async () => {
    // A run takes ~0.7 s (300 ms LLM, 100 ms tool, 300 ms LLM); 40 noisy runs at cap 2 need ~14 s.
    const noisy = await Promise.all(Array.from({ length: 40 }, (_, i) => submit(TENANT_A_KEY, `n${i}`)));
    expect(noisy.every((r) => r.status === 202)).toBe(true);
    await new Promise((r) => setTimeout(r, 500));
    const quiet = await Promise.all([submit(TENANT_C_KEY, 'q1'), submit(TENANT_C_KEY, 'q2')]);
    const quietDone = await Promise.all(quiet.map((r) => finished(TENANT_C_KEY, r.body.runId)));
    // The noisy backlog's end is its last run to finish, whichever it was: a standing interactive
    // line serves its newest runs first (adaptive LIFO), so the last submitted is not the last done.
    const noisyDone = await Promise.all(noisy.map((r) => finished(TENANT_A_KEY, r.body.runId)));
    const lastNoisy = noisyDone.reduce((a, b) => (Date.parse(b.finishedAt) > Date.parse(a.finishedAt) ? b : a));

    for (const q of quietDone) {
      const totalMs = Date.parse(q.finishedAt) - Date.parse(q.admittedAt);
      // Its own execution (~0.7 s) plus scheduling slack, nowhere near the noisy backlog.
      expect(totalMs).toBeLessThan(4_000);
    }
    expect(Date.parse(lastNoisy.finishedAt) - Date.parse(quietDone[1].finishedAt)).toBeGreaterThan(5_000);
  }, 150_000);
});
