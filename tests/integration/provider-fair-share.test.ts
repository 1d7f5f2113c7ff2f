import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_KEY, TENANT_A_KEY, TENANT_C_KEY, eventually, freePort, http, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const TERMINAL = new Set(['completed', 'failed', 'expired', 'cancelled', 'dead_lettered']);

/** Polls a run until it ends; resolves to its final state. */
const ended = (api: string, key: string, runId: string) =>
  eventually(
    async () => {
      const r = await http(`${api}/v1/runs/${runId}`, { key });
      return TERMINAL.has(r.body?.status) ? r.body : undefined;
    },
    60_000,
    `run ${runId} to end`,
    200,
  );

/**
 * A spiking tenant and a quiet one share a provider with a real capacity (the simulator's
 * 240-a-minute limit, which Sluice's config states too), through three processor processes: the
 * quiet tenant's runs all complete, because provider turns are shared by tenant and a run gets all
 * its turns at admission or is refused there.
 */
describe('three processors share a rate-limited provider fairly between a spiking and a quiet tenant', () => {
  const namespace = testNamespace('fair-share');
  const procs: SluiceProcess[] = [];
  let api: string;
  let simulatorUrl: string;

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    const bigBucket = { bucket: { capacity: 10_000, refillPerSec: 1_000 } };
    const configPath = writeTestConfig({
      api: { port: apiPort },
      simulator: { port: simPort, anthropicLatencyMs: 50, anthropicJitterMs: 0, anthropicRateLimit: { requestsPerMinute: 240 } },
      kafka: { partitions: { interactive: 3, batch: 1, status: 1 } },
      tenants: { 'tenant-a': { maxConcurrency: 64, admission: bigBucket }, 'tenant-c': { admission: bigBucket } },
      dependencies: { anthropic: { maxConcurrency: 64, rateLimit: { requestsPerMinute: 240 } } },
    });
    simulatorUrl = `http://127.0.0.1:${simPort}`;
    procs.push(await startSluice({ configPath, roles: 'provider-sim,status-sink,dlq-sink,api', namespace }));
    const processors = await Promise.all([0, 1, 2].map((i) => startSluice({ configPath, roles: 'processor', namespace, env: { SLUICE_INSTANCE_ID: `p${i}` } })));
    procs.push(...processors);
    api = `http://127.0.0.1:${apiPort}`;
    await http(`${simulatorUrl}/admin/stats/reset`, { method: 'POST', key: ADMIN_KEY });
  }, 120_000);

  afterAll(async () => {
    for (const p of procs) await p.stop();
  });

  it('completes every run the quiet tenant sends while the spiking one asks for ten times the capacity', async () => {
    const submit = (key: string, orderId: string) => http(`${api}/v1/runs`, { method: 'POST', key, json: { workflow: 'support-reply', input: { orderId }, deadlineMs: 10_000 } });
    // tenant-a: 300 runs (600 calls) within 5 s, against a full bucket of 240 refilled at 4 a second
    const spike = (async () => {
      const answers = [];
      for (let i = 0; i < 60; i++) {
        answers.push(...(await Promise.all(Array.from({ length: 5 }, (_, j) => submit(TENANT_A_KEY, `A-${i}-${j}`)))));
        await sleep(80);
      }
      return answers;
    })();
    // tenant-c: a run every 2 s for 20 s, one call a second, far under its half
    const quiet = (async () => {
      const answers = [];
      for (let i = 0; i < 10; i++) {
        answers.push(await submit(TENANT_C_KEY, `C-${i}`));
        await sleep(2_000);
      }
      return answers;
    })();
    const [spiked, quieted] = await Promise.all([spike, quiet]);

    expect(quieted.map((r) => r.status)).toEqual(Array(10).fill(202));
    const quietEnds = await Promise.all(quieted.map((r) => ended(api, TENANT_C_KEY, r.body.runId)));
    expect(quietEnds.map((r) => r.status)).toEqual(Array(10).fill('completed'));

    // The spiking tenant was told early: refused at the door (429 over its share, or 503), not left to expire.
    const accepted = spiked.filter((r) => r.status === 202);
    const refused = spiked.filter((r) => r.status === 429 || r.status === 503);
    expect(accepted.length + refused.length).toBe(spiked.length);
    expect(refused.length).toBeGreaterThan(0);
    expect(refused.every((r) => Number(r.headers.get('retry-after')) >= 1)).toBe(true);
    const spikeEnds = await Promise.all(accepted.map((r) => ended(api, TENANT_A_KEY, r.body.runId)));
    const completed = spikeEnds.filter((r) => r.status === 'completed').length;
    // What was admitted had its turns: (nearly) all of it completes.
    expect(completed).toBeGreaterThanOrEqual(Math.floor(accepted.length * 0.95));

    // Turns were booked within the provider's limit: it refused none.
    const stats = (await http(`${simulatorUrl}/admin/stats`, { key: ADMIN_KEY })).body;
    expect(stats.rateLimited.anthropic ?? 0).toBe(0);
  }, 150_000);
});

/** A run refused because its turns come too late says when to come back, and then it is admitted. */
describe('a deadline_unreachable refusal’s Retry-After', () => {
  const namespace = testNamespace('turn-retry-after');
  let proc: SluiceProcess;
  let api: string;

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    const configPath = writeTestConfig({
      api: { port: apiPort },
      simulator: { port: simPort },
      // one call a second and a burst of one: a two-call run books the next two seconds
      dependencies: { anthropic: { rateLimit: { requestsPerMinute: 60, burstSeconds: 1 } } },
    });
    proc = await startSluice({ configPath, roles: 'provider-sim,status-sink,api,processor', namespace });
    api = `http://127.0.0.1:${apiPort}`;
  }, 60_000);

  afterAll(async () => proc?.stop());

  it('is the time after which the same request is admitted', async () => {
    const submit = () => http(`${api}/v1/runs`, { method: 'POST', key: TENANT_C_KEY, json: { workflow: 'support-reply', input: { orderId: 'A-1' }, deadlineMs: 3_000 } });
    const first = await submit();
    expect(first.status).toBe(202);
    const refused = await submit();
    expect(refused.status).toBe(503);
    expect(refused.body.code).toBe('deadline_unreachable');
    const retryAfter = Number(refused.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(refused.body.retryAfterSec).toBe(retryAfter);
    await sleep(retryAfter * 1000);
    const again = await submit();
    expect(again.status).toBe(202);
    expect((await ended(api, TENANT_C_KEY, again.body.runId)).status).toBe('completed');
  }, 60_000);
});
