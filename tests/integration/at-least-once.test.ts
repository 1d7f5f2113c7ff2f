import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_KEY, TENANT_A_KEY, eventually, freePort, http, startSluice, testNamespace, waitForStatus, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * The processor runs in its own process, apart from the API, the status sink and the simulator,
 * so it can be slowed down, killed and restarted while the rest keeps the evidence.
 */
describe('processor liveness and at-least-once delivery', () => {
  let front: SluiceProcess;
  const processors: SluiceProcess[] = [];
  let api: string;
  let sim: string;
  let configPath: string;
  let namespace: string;

  const startProcessor = async () => {
    const p = await startSluice({ configPath, roles: 'processor', namespace });
    processors.push(p);
    await p.waitForLog((l) => l.msg === 'partitions assigned', 60_000);
    return p;
  };
  const setLlmLatency = (latencyMs: number) => http(`${sim}/admin/faults`, { method: 'PUT', key: ADMIN_KEY, json: { target: 'anthropic', latencyMs, jitterMs: 0 } });
  const stats = async () => (await http(`${sim}/admin/stats`, { key: ADMIN_KEY })).body;

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    namespace = testNamespace('alo');
    // The broker's minimum session timeout is 6 s: the slow step below takes longer than that.
    configPath = writeTestConfig({
      api: { port: apiPort },
      simulator: { port: simPort, anthropicLatencyMs: 0, anthropicJitterMs: 0 },
      kafka: { sessionTimeoutMs: 6_000, heartbeatIntervalMs: 1_000, partitions: { interactive: 2, batch: 2, status: 2 } },
      processor: { shutdownGraceMs: 1_000 },
    });
    front = await startSluice({ configPath, roles: 'provider-sim,status-sink,api', namespace });
    api = `http://127.0.0.1:${apiPort}`;
    sim = `http://127.0.0.1:${simPort}`;
  });

  afterAll(async () => {
    for (const p of processors) await p.stop();
    await front?.stop();
  });

  it('finishes an LLM step slower than the session timeout without a rebalance', async () => {
    const processor = await startProcessor();
    expect((await setLlmLatency(9_000)).status).toBe(200);
    const joinsBefore = processor.logs.filter((l) => l.msg === 'partitions assigned').length;

    const submitted = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow: 'support-reply', input: { orderId: '7' }, deadlineMs: 120_000 } });
    expect(submitted.status).toBe(202);
    const done = await waitForStatus(api, submitted.body.runId, TENANT_A_KEY, ['completed', 'failed', 'expired'], 60_000);

    expect(done.status).toBe('completed');
    expect(done.attempts).toBe(1);
    expect(Date.parse(done.finishedAt) - Date.parse(done.startedAt)).toBeGreaterThanOrEqual(18_000);
    // A rebalance would show up as another assignment and as the run starting over.
    expect(processor.logs.filter((l) => l.msg === 'partitions assigned').length).toBe(joinsBefore);
    expect(processor.logs.some((l) => /rebalanc/i.test(String(l.msg)) || l.level === 50)).toBe(false);
    await setLlmLatency(0);
    await processor.stop();
  }, 90_000);

  it('completes a run whose processor was killed mid-run, applying each side effect once', async () => {
    const first = await startProcessor();
    await setLlmLatency(4_000);
    await http(`${sim}/admin/stats/reset`, { method: 'POST', key: ADMIN_KEY });

    const submitted = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow: 'support-reply', input: { orderId: '9' }, deadlineMs: 120_000 } });
    expect(submitted.status).toBe(202);
    const runId = submitted.body.runId as string;
    await waitForStatus(api, runId, TENANT_A_KEY, ['running'], 20_000);
    await first.kill9();

    await setLlmLatency(100);
    await startProcessor();
    const done = await waitForStatus(api, runId, TENANT_A_KEY, ['completed', 'failed', 'expired'], 60_000);
    expect(done.status).toBe('completed');

    const s = await eventually(async () => {
      const body = await stats();
      return body.sideEffects?.['order-lookup'] >= 1 ? body : undefined;
    }, 5_000, 'the order lookup side effect');
    expect(s.sideEffects['order-lookup']).toBe(1);
    // The first LLM call was cut off by the kill, so the LLM was called at least once more.
    expect(s.calls.anthropic).toBeGreaterThanOrEqual(3);
  }, 120_000);
});
