import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BackpressureGauges } from '../../src/api/console/backpressure.js';
import { topicNames } from '../../src/kafka/topics.js';
import { ADMIN_KEY, TENANT_B_KEY, eventually, freePort, http, startSluice, testNamespace, waitForStatus, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * The Backpressure page's processor state over HTTP, with the processor in a process of its own
 * (as in production), from what it publishes to Redis: a run held back by its tenant's limit
 * shows as the oldest waiter of the scopes it needs, and is gone once it starts or once its
 * processor stops; runs held for a forced-open dependency show as held, their partition as
 * paused, and both are gone once their processor stops.
 */
describe("the console's processor state, from a processor in another process", () => {
  const namespace = testNamespace('console-waiters');
  let sluice: SluiceProcess;
  let processor: SluiceProcess | undefined;
  let configPath: string;
  let api: string;
  let cookie: string;

  const startProcessor = async () => startSluice({ configPath, roles: 'processor', namespace, env: { SLUICE_OPS_PORT: String(await freePort()) } });
  const setTenantB = (limit: number) => http(`${api}/v1/admin/limits`, { method: 'PUT', key: ADMIN_KEY, json: { scope: 'tenant', name: 'tenant-b', limit } });
  const submitB = () => http(`${api}/v1/runs`, { method: 'POST', key: TENANT_B_KEY, json: { workflow: 'support-reply', input: { message: 'held' }, deadlineMs: 120_000 } });
  const backpressure = async () => {
    const res = await fetch(`${api}/console/api/backpressure`, { headers: { cookie }, signal: AbortSignal.timeout(10_000) });
    expect(res.status).toBe(200);
    return (await res.json()) as BackpressureGauges;
  };
  const waits = async () => Object.fromEntries((await backpressure()).permits.filter((p) => p.oldestWaitingSec !== undefined).map((p) => [p.scope, p.oldestWaitingSec!]));

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    configPath = writeTestConfig({ api: { port: apiPort }, simulator: { port: simPort, anthropicLatencyMs: 50, anthropicJitterMs: 10 } });
    sluice = await startSluice({ configPath, roles: 'provider-sim,status-sink,api', namespace });
    processor = await startProcessor();
    api = `http://127.0.0.1:${apiPort}`;
    const login = await fetch(`${api}/console/session`, { method: 'POST', headers: { 'content-type': 'application/json', origin: api }, body: JSON.stringify({ key: ADMIN_KEY }), signal: AbortSignal.timeout(10_000) });
    expect(login.status).toBe(200);
    cookie = login.headers.getSetCookie()[0]!.split(';')[0]!;
  });

  afterAll(async () => {
    await processor?.stop();
    await sluice?.stop();
  });

  it('shows a run held by its tenant limit as the oldest waiter of each scope it needs, and no longer once it starts', async () => {
    expect(await backpressure()).toMatchObject({ processorState: { everySec: 2, why: null }, paused: [], held: [] });
    expect(await waits()).toEqual({});
    expect((await setTenantB(0)).status).toBe(200);
    expect((await submitB()).status).toBe(202);
    // Published within a period of the processor queueing it; seen by the API, which runs no processor.
    await expect.poll(async () => Object.keys(await waits()).sort(), { timeout: 20_000, interval: 500 }).toEqual(['global', 'tenant:tenant-b', 'workflow:support-reply']);
    const first = await waits();
    await new Promise((r) => setTimeout(r, 2_500));
    // The wait grows between publications: it is measured from when the run was queued.
    expect((await waits())['tenant:tenant-b']).toBeGreaterThan(first['tenant:tenant-b']! + 1);
    expect((await setTenantB(2)).status).toBe(200);
    await expect.poll(waits, { timeout: 20_000, interval: 500 }).toEqual({});
  });

  it("drops a stopped processor's waiters at once, without waiting for its entry to lapse", async () => {
    expect((await setTenantB(0)).status).toBe(200);
    expect((await submitB()).status).toBe(202);
    await expect.poll(async () => Object.keys(await waits()), { timeout: 20_000, interval: 500 }).toContain('tenant:tenant-b');
    expect(await processor!.stop()).toBe(0);
    processor = undefined;
    // Removed as it stopped: gone at once, not after the 6 s an entry takes to lapse.
    expect(await waits()).toEqual({});
    expect((await setTenantB(2)).status).toBe(200);
  });

  it('shows runs held for an open dependency and their paused partition, and drops them once their processor stops', async () => {
    processor ??= await startProcessor();
    const force = (mode: 'open' | null) =>
      mode ? http(`${api}/v1/admin/breakers/anthropic/force`, { method: 'PUT', key: ADMIN_KEY, json: { mode, durationSec: 600 } }) : http(`${api}/v1/admin/breakers/anthropic/force`, { method: 'DELETE', key: ADMIN_KEY });
    const logsBefore = processor.logs.length;
    expect((await force('open')).status).toBe(200);
    try {
      // Submitted once the processor knows of the force, or a run could start before it does.
      await eventually(async () => processor!.logs.slice(logsBefore).find((l) => l.msg === 'breaker state seen' && l.dependency === 'anthropic' && (l.forced as { mode?: string } | null)?.mode === 'open'), 15_000, 'the processor to see the force');
      // Batch runs are admitted while the breaker is open, and wait for it in the processor.
      const runs = await Promise.all(Array.from({ length: 3 }, (_, i) => http(`${api}/v1/runs`, { method: 'POST', key: TENANT_B_KEY, json: { workflow: 'report-digest', input: { day: `held${i}` }, deadlineMs: 120_000 } })));
      expect(runs.map((r) => r.status)).toEqual([202, 202, 202]);
      // The partition pauses once all it buffered waits for the breaker, so a run produced after
      // that may stay in Kafka, unread and `queued`: every run read is held, at least the first.
      const heldVsRead = async () => {
        const statuses = await Promise.all(runs.map(async (r) => (await http(`${api}/v1/runs/${r.body.runId}`, { key: TENANT_B_KEY })).body.status as string));
        const read = statuses.filter((st) => st === 'waiting_dependency').length;
        const held = (await backpressure()).held;
        const expected = [{ dependency: 'anthropic', runs: read, tenants: { 'tenant-b': read } }];
        return read >= 1 && statuses.every((st) => st === 'waiting_dependency' || st === 'queued') && JSON.stringify(held) === JSON.stringify(expected) ? 'every run read is held' : JSON.stringify({ statuses, held });
      };
      await expect.poll(heldVsRead, { timeout: 20_000, interval: 500 }).toBe('every run read is held');
      // Every run buffered from their partitions waits for the breaker, so those partitions are paused.
      await expect.poll(async () => (await backpressure()).paused.map((p) => ({ reason: p.reason, processors: p.processors, topics: p.topics.map((t) => t.topic) })), { timeout: 20_000, interval: 500 }).toEqual([
        { reason: 'breaker_open', processors: 1, topics: [topicNames(namespace).batch] },
      ]);
      const [paused] = (await backpressure()).paused;
      expect(paused!.partitions).toBe(paused!.topics[0]!.partitions.length);
      expect(paused!.unlisted).toBe(0);
      expect(await processor!.stop()).toBe(0);
      processor = undefined;
      // Removed as it stopped, not left to lapse.
      expect(await backpressure()).toMatchObject({ processorState: { why: null }, paused: [], held: [] });
      expect((await force(null)).status).toBe(200);
      processor = await startProcessor();
      for (const r of runs) await waitForStatus(api, r.body.runId, TENANT_B_KEY, ['completed'], 60_000);
      await expect.poll(async () => { const bp = await backpressure(); return [bp.paused, bp.held]; }, { timeout: 20_000, interval: 500 }).toEqual([[], []]);
    } finally {
      await force(null);
    }
  });
});
