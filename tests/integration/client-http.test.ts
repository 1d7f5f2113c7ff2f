import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SluiceClient, SluiceRefusal, type RunEvent } from '../../src/client/index.js';
import { TENANT_A_KEY, TENANT_B_KEY, freePort, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';

interface Exchange {
  at: number;
  status: number;
  retryAfter: string | null;
  idempotencyKey: string | null;
}

/** The exported client against a running Sluice: what a caller's program sees. */
describe('SluiceClient against Sluice', () => {
  let sluice: SluiceProcess;
  let baseUrl: string;
  const input = { message: 'Where is order 42?', orderId: '42' };

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    sluice = await startSluice({
      // tenant-b's entry bucket holds one submission and refills one a second.
      configPath: writeTestConfig({ api: { port: apiPort }, simulator: { port: simPort }, tenants: { 'tenant-b': { admission: { bucket: { capacity: 1, refillPerSec: 1 } } } } }),
      roles: 'provider-sim,status-sink,processor,api',
      namespace: testNamespace('client'),
    });
    baseUrl = `http://127.0.0.1:${apiPort}`;
  });

  afterAll(async () => {
    expect(await sluice?.stop()).toBe(0);
  });

  it('submits support-reply and follows its events to completion', async () => {
    const client = new SluiceClient({ baseUrl, apiKey: TENANT_A_KEY });
    const run = await client.submit({ workflow: 'support-reply', input });
    expect(run).toMatchObject({ status: 'queued', admission: 'admitted', queued: false, idempotentReplayed: false });

    const events: RunEvent[] = [];
    for await (const e of client.events(run.runId, { signal: AbortSignal.timeout(60_000) })) events.push(e);
    expect(events.at(-1)!.status).toBe('completed');
    expect(events.map((e) => e.sequence)).toEqual([...events.map((e) => e.sequence)].sort((a, b) => a - b));
    expect(new Set(events.map((e) => e.sequence)).size).toBe(events.length);

    const done = await client.waitForResult(run.runId, { timeoutMs: 10_000 });
    expect(done).toMatchObject({ runId: run.runId, status: 'completed', attempts: 1 });
    expect((done.result as { text: string }).text).toContain('Simulated reply');
  });

  it("waits out a tenant's rate limit when asked to retry, with one Idempotency-Key", async () => {
    const exchanges: Exchange[] = [];
    const recording: typeof fetch = async (url, init) => {
      const at = Date.now();
      const res = await fetch(url, init);
      exchanges.push({ at, status: res.status, retryAfter: res.headers.get('retry-after'), idempotencyKey: new Headers(init?.headers).get('idempotency-key') });
      return res;
    };
    const client = new SluiceClient({ baseUrl, apiKey: TENANT_B_KEY, fetch: recording });

    await client.submit({ workflow: 'support-reply', input });
    const refusal = await client.submit({ workflow: 'support-reply', input }).catch((e: unknown) => e);
    expect(refusal).toBeInstanceOf(SluiceRefusal);
    expect(refusal).toMatchObject({ status: 429, code: 'rate_limited', retryable: true });
    expect((refusal as SluiceRefusal).retryAfterSec).toBeGreaterThanOrEqual(1);
    expect((refusal as SluiceRefusal).requestId).toBeTruthy();

    exchanges.length = 0;
    const run = await client.submit({ workflow: 'support-reply', input, retry: { maxAttempts: 3, maxWaitMs: 5_000 } });
    expect(run.runId).toBeTruthy();
    const [first, ...rest] = exchanges;
    expect(first).toMatchObject({ status: 429 });
    expect(first!.retryAfter).toMatch(/^\d+$/);
    expect(rest.at(-1)!.status).toBe(202);
    expect(rest[0]!.at - first!.at).toBeGreaterThanOrEqual(Number(first!.retryAfter) * 1000);
    expect(new Set(exchanges.map((e) => e.idempotencyKey))).toEqual(new Set([run.idempotencyKey]));
  });

  it('answers an idempotent resubmission with the same run', async () => {
    const client = new SluiceClient({ baseUrl, apiKey: TENANT_A_KEY });
    const idempotencyKey = `client-test-${Date.now()}`;
    const first = await client.submit({ workflow: 'support-reply', input, idempotencyKey });
    const again = await client.submit({ workflow: 'support-reply', input, idempotencyKey });
    expect(first.idempotentReplayed).toBe(false);
    expect(again).toMatchObject({ runId: first.runId, idempotentReplayed: true, idempotencyKey });
  });
});
