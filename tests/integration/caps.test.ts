import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scrapeMetrics, ADMIN_KEY, TENANT_A_KEY, TENANT_B_KEY, TENANT_C_KEY, eventually, freePort, http, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';
import { REDIS_BACKENDS, redisEnvOf } from './lua/redis-clients.js';

const TERMINAL = ['completed', 'failed', 'expired', 'cancelled', 'dead_lettered'];
const CAPS = { global: 6, tenantA: 3, tenantB: 2, tenantC: 2, supportReply: 4, anthropic: 4, orderLookup: 2, report: 2 };

/**
 * Three processor processes in one consumer group share caps through Redis: the simulator counts
 * concurrent calls per tenant and per dependency, and must never see more than a cap allows.
 */
describe.each(REDIS_BACKENDS)('distributed concurrency caps across three processors (%s Redis)', (backend) => {
  const namespace = testNamespace('caps');
  let front: SluiceProcess;
  const processors: SluiceProcess[] = [];
  let api: string;
  let sim: string;
  let configPath: string;

  const startProcessor = async () => {
    const p = await startSluice({ configPath, roles: 'processor', namespace, env: redisEnvOf(backend) });
    processors.push(p);
    return p;
  };
  const admin = (path: string, init: Parameters<typeof http>[1] = {}) => http(`${sim}${path}`, { key: ADMIN_KEY, ...init });
  const submit = (key: string, workflow: string, input: unknown) => http(`${api}/v1/runs`, { method: 'POST', key, json: { workflow, input, deadlineMs: 120_000 } });
  const statusOf = async (key: string, runId: string) => (await http(`${api}/v1/runs/${runId}`, { key })).body?.status as string | undefined;
  const allTerminal = (runs: { key: string; runId: string }[], timeoutMs: number) =>
    eventually(
      async () => {
        const statuses = await Promise.all(runs.map((r) => statusOf(r.key, r.runId)));
        return statuses.every((s) => s && TERMINAL.includes(s)) ? statuses : undefined;
      },
      timeoutMs,
      'every run to reach a terminal status',
      250,
    );

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    const bigBucket = { bucket: { capacity: 10_000, refillPerSec: 1_000 } };
    configPath = writeTestConfig({
      api: { port: apiPort },
      simulator: { port: simPort, anthropicLatencyMs: 200, anthropicJitterMs: 50 },
      kafka: { sessionTimeoutMs: 6_000, heartbeatIntervalMs: 1_000, partitions: { interactive: 3, batch: 3, status: 3 } },
      limits: { global: CAPS.global, batchShare: 0.5 },
      processor: { maxInFlight: 10, permitLeaseMs: 3_000, shutdownGraceMs: 1_000 },
      tenants: {
        'tenant-a': { maxConcurrency: CAPS.tenantA, admission: bigBucket },
        'tenant-b': { maxConcurrency: CAPS.tenantB, admission: bigBucket },
        'tenant-c': { maxConcurrency: CAPS.tenantC, admission: bigBucket },
      },
      workflows: { 'support-reply': { maxConcurrency: CAPS.supportReply } },
      dependencies: { anthropic: { maxConcurrency: CAPS.anthropic }, 'order-lookup': { maxConcurrency: CAPS.orderLookup }, report: { maxConcurrency: CAPS.report } },
    });
    front = await startSluice({ configPath, roles: 'provider-sim,status-sink,api', namespace, env: redisEnvOf(backend) });
    api = `http://127.0.0.1:${apiPort}`;
    sim = `http://127.0.0.1:${simPort}`;
    for (const tool of ['order-lookup', 'report', 'notify']) await admin('/admin/faults', { method: 'PUT', json: { target: tool, latencyMs: 150 } });
    for (let i = 0; i < 3; i++) await startProcessor();
  });

  afterAll(async () => {
    for (const p of processors) await p.stop();
    await front?.stop();
  });

  it('never exceeds the global, tenant, workflow or dependency caps under mixed load', async () => {
    await admin('/admin/stats/reset', { method: 'POST' });
    const submissions = [
      ...Array.from({ length: 24 }, (_, i) => ({ key: TENANT_A_KEY, workflow: 'support-reply', input: { orderId: `a${i}` } })),
      ...Array.from({ length: 8 }, (_, i) => ({ key: TENANT_B_KEY, workflow: 'report-digest', input: { n: i } })),
      ...Array.from({ length: 12 }, (_, i) => ({ key: TENANT_C_KEY, workflow: 'support-reply', input: { orderId: `c${i}` } })),
    ];
    const answers = await Promise.all(submissions.map((s) => submit(s.key, s.workflow, s.input)));
    expect(answers.map((a) => a.status)).toEqual(Array(submissions.length).fill(202));
    const runs = answers.map((a, i) => ({ key: submissions[i]!.key, runId: a.body.runId as string }));
    const statuses = await allTerminal(runs, 90_000);
    expect(statuses.every((s) => s === 'completed')).toBe(true);

    const { maxConcurrent, sideEffects } = (await admin('/admin/stats')).body;
    expect(maxConcurrent.total).toBeLessThanOrEqual(CAPS.global);
    expect(maxConcurrent.byTenant['tenant-a']).toBeLessThanOrEqual(CAPS.tenantA);
    expect(maxConcurrent.byTenant['tenant-b']).toBeLessThanOrEqual(CAPS.tenantB);
    expect(maxConcurrent.byTenant['tenant-c']).toBeLessThanOrEqual(CAPS.tenantC);
    expect(maxConcurrent.byTarget.anthropic).toBeLessThanOrEqual(CAPS.anthropic);
    expect(maxConcurrent.byTarget['order-lookup']).toBeLessThanOrEqual(CAPS.orderLookup);
    expect(maxConcurrent.byTarget.report).toBeLessThanOrEqual(CAPS.report);
    // The caps were reached, so the test exercised them rather than an idle system.
    expect(maxConcurrent.byTenant['tenant-a']).toBe(CAPS.tenantA);
    expect(maxConcurrent.byTarget.anthropic).toBe(CAPS.anthropic);
    expect(sideEffects['order-lookup']).toBe(36);
    expect(sideEffects.report).toBe(16);
  }, 120_000);

  it('applies a limit changed at run time on every processor without a restart', async () => {
    const put = await http(`${api}/v1/admin/limits`, { method: 'PUT', key: ADMIN_KEY, json: { scope: 'tenant', name: 'tenant-a', limit: 1 } });
    expect(put.status).toBe(200);
    try {
      const metrics = await scrapeMetrics(api).then((r) => r.text());
      expect(metrics).toContain('sluice_permit_limit{scope="tenant:tenant-a"} 1');
      expect(metrics).toMatch(/sluice_permits_in_use\{scope="global"\} \d+/);
      await admin('/admin/stats/reset', { method: 'POST' });
      const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => submit(TENANT_A_KEY, 'support-reply', { orderId: `lim${i}` })));
      await allTerminal(answers.map((a) => ({ key: TENANT_A_KEY, runId: a.body.runId })), 60_000);
      expect((await admin('/admin/stats')).body.maxConcurrent.byTenant['tenant-a']).toBe(1);
    } finally {
      await http(`${api}/v1/admin/limits`, { method: 'PUT', key: ADMIN_KEY, json: { scope: 'tenant', name: 'tenant-a', limit: CAPS.tenantA } });
    }
  }, 90_000);

  it('after kill -9 of a processor its permits come back within the lease and every run finishes, each side effect once', async () => {
    await admin('/admin/stats/reset', { method: 'POST' });
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => submit(TENANT_A_KEY, 'support-reply', { orderId: `k${i}` })));
    const runs = answers.map((a) => ({ key: TENANT_A_KEY, runId: a.body.runId as string }));
    await eventually(async () => ((await admin('/admin/stats')).body.calls.anthropic >= 3 ? true : undefined), 20_000, 'runs to be under way');
    await processors[0]!.kill9();
    const statuses = await allTerminal(runs, 90_000);
    expect(statuses.every((s) => s === 'completed')).toBe(true);
    const stats = (await admin('/admin/stats')).body;
    expect(stats.sideEffects['order-lookup']).toBe(12);
    expect(stats.maxConcurrent.byTenant['tenant-a']).toBeLessThanOrEqual(CAPS.tenantA);
    // Leases of the killed process lapsed: the remaining processors can take the full cap again.
    const after = await Promise.all(Array.from({ length: 6 }, (_, i) => submit(TENANT_A_KEY, 'support-reply', { orderId: `after${i}` })));
    await admin('/admin/stats/reset', { method: 'POST' });
    await allTerminal(after.map((a) => ({ key: TENANT_A_KEY, runId: a.body.runId })), 60_000);
    expect((await admin('/admin/stats')).body.maxConcurrent.byTenant['tenant-a']).toBe(CAPS.tenantA);
  }, 150_000);
});
