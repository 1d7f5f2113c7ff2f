import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_KEY, TENANT_A_KEY, eventually, freePort, http, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * Kafka-native backpressure: a processor reads at most `partitionBuffer` records ahead per
 * partition, pauses the partition when that is full, and resumes it as work drains — also across a
 * rebalance (kafkajs' pause/resume had regressions there, so it is checked against the real broker).
 */
describe('partition pause and resume', () => {
  const namespace = testNamespace('bp');
  const procs: SluiceProcess[] = [];
  let api: string;
  let configPath: string;

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    configPath = writeTestConfig({
      api: { port: apiPort },
      simulator: { port: simPort, anthropicLatencyMs: 100, anthropicJitterMs: 0 },
      kafka: { sessionTimeoutMs: 6_000, heartbeatIntervalMs: 1_000, partitions: { interactive: 2, batch: 1, status: 1 } },
      processor: { partitionBuffer: 4, maxInFlight: 10 },
      tenants: { 'tenant-a': { maxConcurrency: 1, admission: { bucket: { capacity: 1_000, refillPerSec: 100 } } } },
    });
    procs.push(await startSluice({ configPath, roles: 'provider-sim,status-sink,api', namespace }));
    api = `http://127.0.0.1:${apiPort}`;
    await http(`http://127.0.0.1:${simPort}/admin/faults`, { method: 'PUT', key: ADMIN_KEY, json: { target: 'order-lookup', latencyMs: 50 } });
  });

  afterAll(async () => {
    for (const p of procs.reverse()) await p.stop();
  });

  it('pauses a full partition and resumes it as work drains, until everything is done, through a rebalance', async () => {
    const first = await startSluice({ configPath, roles: 'processor', namespace });
    procs.push(first);
    const answers = await Promise.all(Array.from({ length: 24 }, (_, i) => http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow: 'support-reply', input: { orderId: `bp${i}` }, deadlineMs: 120_000 } })));
    expect(answers.every((a) => a.status === 202)).toBe(true);

    const paused = (l: Record<string, unknown>) => String(l.msg).startsWith('partition paused');
    await first.waitForLog(paused, 30_000);
    // A second processor joins while the partition is paused: the group rebalances under load.
    procs.push(await startSluice({ configPath, roles: 'processor', namespace }));

    await eventually(
      async () => {
        const statuses = await Promise.all(answers.map(async (a) => (await http(`${api}/v1/runs/${a.body.runId}`, { key: TENANT_A_KEY })).body?.status));
        return statuses.every((s) => s === 'completed') ? true : undefined;
      },
      90_000,
      'all runs to complete',
      250,
    );
    // Each processor's pauses and resumes alternate per partition: never paused twice without resuming.
    for (const p of procs.slice(1)) {
      const state = new Map<unknown, string>();
      for (const l of p.logs) {
        const event = paused(l) ? 'paused' : l.msg === 'partition resumed' ? 'resumed' : undefined;
        if (!event) continue;
        expect(state.get(l.partition)).not.toBe(event);
        state.set(l.partition, event);
      }
    }
    expect(first.logs.some((l) => l.msg === 'partition resumed')).toBe(true);
  }, 150_000);
});
