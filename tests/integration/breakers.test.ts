import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_KEY, TENANT_A_KEY, TENANT_B_KEY, TENANT_C_KEY, eventually, freePort, http, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';
import { REDIS_BACKENDS, redisEnvOf } from './lua/redis-clients.js';

const TERMINAL = ['completed', 'failed', 'expired', 'cancelled', 'dead_lettered'];
const PER_TENANT = 20;
const FAULT_MS = 10_000;

/**
 * The sales-day avalanche, replayed: the provider answers every LLM call with 429 for 10 s while a
 * burst of runs arrives. Two processor processes must learn of the open breaker within a fraction
 * of a second of each other, stop calling (probes only), answer interactive runs honestly at once
 * (tenant-a degrades, tenant-c fails), let batch runs wait, and drain them after the fault with no
 * second wave of retries.
 */
describe.each(REDIS_BACKENDS)('shared breakers under a 10 s provider 429 storm, two processors (%s Redis)', (backend) => {
  const namespace = testNamespace('breakers');
  let front: SluiceProcess;
  const processors: SluiceProcess[] = [];
  let api: string;
  let sim: string;

  const admin = (path: string, init: Parameters<typeof http>[1] = {}) => http(`${sim}${path}`, { key: ADMIN_KEY, ...init });
  const submit = (key: string, workflow: string, input: unknown, deadlineMs: number) => http(`${api}/v1/runs`, { method: 'POST', key, json: { workflow, input, deadlineMs } });
  const runView = async (key: string, runId: string) => (await http(`${api}/v1/runs/${runId}`, { key })).body;
  /** A batch run's view once it waits for anthropic, and every batch run's once all are over. */
  const batchWaiting = (runId: string, timeoutMs: number, what: string) =>
    eventually(async () => {
      const v = await runView(TENANT_B_KEY, runId);
      return v.status === 'waiting_dependency' ? v : undefined;
    }, timeoutMs, what);
  const batchFinished = (ids: readonly string[], timeoutMs: number, what: string) =>
    eventually(
      async () => {
        const all = await Promise.all(ids.map((id) => runView(TENANT_B_KEY, id)));
        return all.every((v) => TERMINAL.includes(v?.status)) ? all : undefined;
      },
      timeoutMs,
      what,
      500,
    );

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    const bigBucket = { bucket: { capacity: 10_000, refillPerSec: 1_000 } };
    const configPath = writeTestConfig({
      api: { port: apiPort },
      simulator: { port: simPort, anthropicLatencyMs: 100, anthropicJitterMs: 20 },
      kafka: { sessionTimeoutMs: 6_000, heartbeatIntervalMs: 1_000, partitions: { interactive: 2, batch: 2, retry: 2, status: 2 } },
      processor: { shutdownGraceMs: 1_000 },
      tenants: { 'tenant-a': { admission: bigBucket }, 'tenant-b': { admission: bigBucket }, 'tenant-c': { admission: bigBucket } },
    });
    front = await startSluice({ configPath, roles: 'provider-sim,status-sink,api', namespace, env: redisEnvOf(backend) });
    api = `http://127.0.0.1:${apiPort}`;
    sim = `http://127.0.0.1:${simPort}`;
    for (let i = 0; i < 2; i++) processors.push(await startSluice({ configPath, roles: 'processor', namespace, env: redisEnvOf(backend) }));
    // Both processors must own partitions before the burst, or one would see no work at all.
    await eventually(async () => (processors.every((p) => p.logs.some((l) => l.msg === 'partitions assigned')) ? true : undefined), 30_000, 'both processors to be assigned partitions');
  });

  afterAll(async () => {
    await admin('/admin/faults', { method: 'DELETE' }).catch(() => undefined);
    for (const p of processors) await p.stop();
    await front?.stop();
  });

  it('opens everywhere at once, bounds calls by probes, answers by tenant policy and drains without a second wave', async () => {
    await admin('/admin/stats/reset', { method: 'POST' });
    expect((await admin('/admin/faults', { method: 'PUT', json: { target: 'anthropic', errorStatus: 429, errorRate: 1, retryAfterSec: 1 } })).status).toBe(200);
    const faultStarted = Date.now();

    const submissions = [
      ...Array.from({ length: PER_TENANT }, (_, i) => ({ key: TENANT_A_KEY, workflow: 'support-reply', input: { orderId: `a${i}` }, deadlineMs: 4_000 })),
      ...Array.from({ length: PER_TENANT }, (_, i) => ({ key: TENANT_C_KEY, workflow: 'support-reply', input: { orderId: `c${i}` }, deadlineMs: 4_000 })),
      ...Array.from({ length: PER_TENANT }, (_, i) => ({ key: TENANT_B_KEY, workflow: 'report-digest', input: { day: i }, deadlineMs: 120_000 })),
    ];
    const answers = await Promise.all(submissions.map((s) => submit(s.key, s.workflow, s.input, s.deadlineMs)));
    expect(answers.map((a) => a.status)).toEqual(Array(submissions.length).fill(202));
    const runs = answers.map((a, i) => ({ ...submissions[i]!, runId: a.body.runId as string }));

    // Both instances learn of the open breaker, within 250 ms of each other.
    const openSeen = await Promise.all(processors.map((p) => p.waitForLog((l) => l.msg === 'breaker state seen' && l.dependency === 'anthropic' && l.to === 'open', 15_000)));
    const seenAt = openSeen.map((l) => l.seenAt as number);
    expect(Math.abs(seenAt[0]! - seenAt[1]!)).toBeLessThanOrEqual(250);

    await new Promise((r) => setTimeout(r, Math.max(0, faultStarted + FAULT_MS - Date.now())));
    const duringFault = (await admin('/admin/stats')).body;
    await admin('/admin/faults', { method: 'DELETE' });
    await admin('/admin/stats/reset', { method: 'POST' });

    const views = await eventually(
      async () => {
        const all = await Promise.all(runs.map((r) => runView(r.key, r.runId)));
        return all.every((v) => TERMINAL.includes(v?.status)) ? all : undefined;
      },
      90_000,
      'every run to reach a terminal status',
      500,
    );
    const afterFault = (await admin('/admin/stats')).body;

    // Calls during the fault: each run's first call at most, plus probes; not multiplied by retries.
    const offered = runs.length;
    expect(duringFault.calls.anthropic).toBeLessThanOrEqual(1.2 * offered);

    const byTenant = (key: string) => views.filter((_, i) => runs[i]!.key === key);
    for (const v of byTenant(TENANT_A_KEY)) {
      expect(v.status).toBe('completed');
      expect(v.result).toMatchObject({ degraded: true, unavailable: [{ dependency: 'anthropic' }] });
    }
    for (const v of byTenant(TENANT_C_KEY)) {
      expect(v.status).toBe('failed');
      expect(v.error).toMatchObject({ code: 'dependency_unavailable' });
    }
    for (const v of byTenant(TENANT_B_KEY)) {
      expect(v.status).toBe('completed');
      expect(v.result).toMatchObject({ degraded: false });
    }

    // After the fault: two LLM calls per waiting batch run and the closing probes, no retry wave.
    const batchCalls = 2 * PER_TENANT;
    expect(afterFault.errors.anthropic ?? 0).toBe(0);
    expect(afterFault.calls.anthropic).toBeLessThanOrEqual(batchCalls + 2);
    expect(afterFault.calls.anthropic).toBeGreaterThanOrEqual(batchCalls - 2);
  });

  it('holds batch work while the breaker is open, pauses its partition, and resumes and completes it once probes succeed', async () => {
    const logsBefore = processors.map((p) => p.logs.length);
    const seenSince = (i: number, predicate: (l: Record<string, unknown>) => boolean) => processors[i]!.logs.slice(logsBefore[i]).some(predicate);
    await admin('/admin/faults', { method: 'PUT', json: { target: 'anthropic', errorStatus: 429, errorRate: 1, retryAfterSec: 1 } });
    // A few interactive runs trip the breaker (each fails, the fifth failure opens it).
    const trips = await Promise.all(Array.from({ length: 6 }, (_, i) => submit(TENANT_A_KEY, 'support-reply', { orderId: `trip${i}` }, 3_000)));
    expect(trips.map((t) => t.status)).toEqual(Array(6).fill(202));
    await eventually(async () => (processors.every((_, i) => seenSince(i, (l) => l.msg === 'breaker state seen' && l.to === 'open')) ? true : undefined), 15_000, 'both processors to see the breaker open');

    const batch = await Promise.all(Array.from({ length: 8 }, (_, i) => submit(TENANT_B_KEY, 'report-digest', { day: `held${i}` }, 120_000)));
    expect(batch.map((b) => b.status)).toEqual(Array(8).fill(202));
    const ids = batch.map((b) => b.body.runId as string);
    await eventually(
      async () => (processors.some((_, i) => seenSince(i, (l) => l.msg === 'partition paused: all its buffered work waits for an open dependency')) ? true : undefined),
      15_000,
      'the batch partition to be paused for the open breaker',
    );
    const waiting = await batchWaiting(ids[0]!, 10_000, 'the held run to read waiting_dependency');
    expect(waiting.statusMessage).toMatch(/waiting for anthropic \(breaker open\)/);

    await admin('/admin/faults', { method: 'DELETE' });
    const done = await batchFinished(ids, 60_000, 'the held batch runs to finish after the fault');
    expect(done.map((v) => v.status)).toEqual(Array(8).fill('completed'));
    expect(processors.some((_, i) => seenSince(i, (l) => l.msg === 'partition resumed'))).toBe(true);
  }, 120_000);

  it('a force from the admin API reaches both processors at once: forced open holds batch work without a call, forced closed releases it', async () => {
    const logsBefore = processors.map((p) => p.logs.length);
    const forceSeen = (mode: string | null) =>
      Promise.all(processors.map((p, i) => eventually(async () => p.logs.slice(logsBefore[i]).find((l) => l.msg === 'breaker state seen' && l.dependency === 'anthropic' && ((l.forced as { mode?: string } | null)?.mode ?? null) === mode), 15_000, `processor ${i} to see the force ${mode}`)));
    const force = (mode: 'open' | 'closed') => http(`${api}/v1/admin/breakers/anthropic/force`, { method: 'PUT', key: ADMIN_KEY, json: { mode, durationSec: 600 } });

    expect((await force('open')).status).toBe(200);
    const seenOpen = await forceSeen('open');
    expect(Math.abs((seenOpen[0]!.seenAt as number) - (seenOpen[1]!.seenAt as number))).toBeLessThanOrEqual(250);
    await admin('/admin/stats/reset', { method: 'POST' });
    const batch = await Promise.all(Array.from({ length: 4 }, (_, i) => submit(TENANT_B_KEY, 'report-digest', { day: `forced${i}` }, 120_000)));
    expect(batch.map((b) => b.status)).toEqual(Array(4).fill(202));
    const ids = batch.map((b) => b.body.runId as string);
    const waiting = await batchWaiting(ids[0]!, 15_000, 'a batch run to wait for the forced-open breaker');
    expect(waiting.statusMessage).toMatch(/waiting for anthropic \(breaker open\)/);
    expect((await admin('/admin/stats')).body.calls.anthropic ?? 0).toBe(0);

    // Forced closed: the held runs are gated again at once, not at the forced-open end 10 min away.
    expect((await force('closed')).status).toBe(200);
    await forceSeen('closed');
    const done = await batchFinished(ids, 30_000, 'the held batch runs to finish once forced closed');
    expect(done.map((v) => v.status)).toEqual(Array(4).fill('completed'));
    expect((await http(`${api}/v1/admin/breakers/anthropic/force`, { method: 'DELETE', key: ADMIN_KEY })).body).toEqual({ dependency: 'anthropic', forced: null });
    await forceSeen(null);
  }, 120_000);
});
