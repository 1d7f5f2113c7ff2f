import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_KEY, TENANT_B_KEY, freePort, http, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';

interface PermitUse {
  scope: string;
  inUse: number;
  limit: number;
  oldestWaitingSec?: number;
}

/**
 * The Backpressure page's oldest waiters over HTTP, with the processor in a process of its own
 * (as in production): a run held back by its tenant's limit shows as the oldest waiter of the
 * scopes it needs, from what the processor publishes to Redis, and is gone once it starts or
 * once its processor stops.
 */
describe("the console's oldest waiters, from a processor in another process", () => {
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
    return (await res.json()) as { permits: PermitUse[]; oldestWaiters: { everySec: number; why: string | null } };
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
    expect(await backpressure()).toMatchObject({ oldestWaiters: { everySec: 2, why: null } });
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
});
