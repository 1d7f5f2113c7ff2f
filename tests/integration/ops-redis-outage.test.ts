import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sample } from '../support/metric-value.js';
import { readStatusStream } from '../support/sse.js';
import { startThrowawayRedis, type ThrowawayRedis } from '../support/throwaway-redis.js';
import { scrapeMetrics, TENANT_A_KEY, TENANT_B_KEY, TENANT_C_KEY, eventually, freePort, http, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';

/** A run id in the right format that no run has: reads of it are answered 404 after the lookup. */
const NO_SUCH_RUN = '0190f5a2-7c00-7abc-8def-0123456789ab';

/**
 * The API against a Redis of its own that the test stops: the ops endpoints keep answering
 * (/metrics renders without the Redis gauges, /readyz says which check fails but not why) and
 * reads of runs fail open to the instance's own bucket. Before that, the read bounds are checked
 * against the real Redis bucket.
 */
describe('ops endpoints and read limits while Redis is down', () => {
  const namespace = testNamespace('ops-redis');
  let redis: ThrowawayRedis;
  let sluice: SluiceProcess;
  let api: string;
  /** tenant-b's one stream, open until Sluice stops. */
  let openStream: Promise<unknown> | undefined;

  beforeAll(async () => {
    redis = await startThrowawayRedis();
    const apiPort = await freePort();
    const configPath = writeTestConfig({
      api: { port: apiPort },
      tenants: {
        'tenant-a': { reads: { bucket: { capacity: 2, refillPerSec: 0.2 } } },
        'tenant-b': { reads: { maxStreams: 1 } },
      },
    });
    sluice = await startSluice({ configPath, roles: 'api', namespace, env: { REDIS_URL: redis.url } });
    api = `http://127.0.0.1:${apiPort}`;
  });

  afterAll(async () => {
    await sluice?.stop();
    await openStream;
    await redis?.close();
  });

  const scrape = async () => {
    const res = await scrapeMetrics(api);
    return { status: res.status, text: await res.text() };
  };

  it('with Redis up: the permit gauges render, and reads are bounded per tenant by the shared bucket and the stream bound', async () => {
    const ready = await eventually(async () => {
      const r = await http(`${api}/readyz`);
      return r.status === 200 ? r.body : undefined;
    }, 10_000, '/readyz to answer 200');
    expect(ready).toEqual({ status: 'ready', checks: [{ name: 'kafka', ok: true }, { name: 'redis', ok: true }, { name: 'postgres', ok: true }] });

    const healthy = await scrape();
    expect(healthy.status).toBe(200);
    expect(sample(healthy.text, 'sluice_permits_in_use{scope="global"}')).toBe(0);
    expect(sample(healthy.text, 'sluice_scrape_errors_total{collector="permits"}')).toBe(0);

    // tenant-a's bucket holds 2 reads and refills one per 5 s.
    const reads = [];
    for (let i = 0; i < 3; i++) reads.push(await http(`${api}/v1/runs/${NO_SUCH_RUN}`, { key: TENANT_A_KEY }));
    expect(reads.map((r) => r.status)).toEqual([404, 404, 429]);
    expect(reads[2]!.body).toMatchObject({ code: 'rate_limited', retryable: true });
    expect(Number(reads[2]!.headers.get('retry-after'))).toBeGreaterThanOrEqual(4);
    expect(Number(reads[2]!.headers.get('retry-after'))).toBeLessThanOrEqual(5);

    // tenant-b may hold one stream open on this instance.
    const submitted = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_B_KEY, json: { workflow: 'support-reply', input: { orderId: '7' }, deadlineMs: 120_000 } });
    expect(submitted.status).toBe(202);
    const url = `${api}/v1/runs/${submitted.body.runId}/events`;
    let opened = false;
    openStream = readStatusStream(url, { key: TENANT_B_KEY, stopWhen: (events) => (opened = events.length > 0) && false, timeoutMs: 30_000 }).catch(() => undefined);
    await eventually(async () => (opened ? true : undefined), 10_000, 'the first stream to send the queued event');
    const second = await http(url, { key: TENANT_B_KEY });
    expect(second.status).toBe(429);
    expect(second.body).toMatchObject({ code: 'rate_limited', retryAfterSec: 5 });
    const refusals = await scrape();
    expect(sample(refusals.text, 'sluice_read_refusals_total{tenant="tenant-a",reason="rate_limited"}')).toBe(1);
    expect(sample(refusals.text, 'sluice_read_refusals_total{tenant="tenant-b",reason="streams_full"}')).toBe(1);
  });

  it('with Redis stopped: /metrics answers 200 without the Redis gauges and counts the failed read; /readyz answers 503 naming the check, not the error', async () => {
    await redis.stop();

    const down = await scrape();
    expect(down.status).toBe(200);
    expect(down.text).not.toContain('sluice_permits_in_use{');
    expect(down.text).not.toContain('sluice_permit_limit{');
    expect(sample(down.text, 'sluice_scrape_errors_total{collector="permits"}')).toBeGreaterThanOrEqual(1);
    expect(down.text).toContain('sluice_process_process_cpu_seconds_total');

    const notReady = await eventually(async () => {
      const r = await http(`${api}/readyz`);
      return r.status === 503 ? r : undefined;
    }, 15_000, '/readyz to answer 503');
    expect(notReady.body).toEqual({ status: 'not_ready', checks: [{ name: 'kafka', ok: true }, { name: 'redis', ok: false }, { name: 'postgres', ok: true }] });
    expect(JSON.stringify(notReady.body)).not.toMatch(/ECONNREFUSED|Connection|127\.0\.0\.1/);
    // Why it failed is in the log.
    await sluice.waitForLog((l) => l.msg === 'readiness check failed' && l.check === 'redis' && typeof (l.err as { message?: string })?.message === 'string', 5_000);
  });

  it('with Redis stopped: reads fail open to the instance bucket and count it', async () => {
    const read = await http(`${api}/v1/runs/${NO_SUCH_RUN}`, { key: TENANT_C_KEY });
    expect(read.status).toBe(404);
    const text = (await scrape()).text;
    expect(sample(text, 'sluice_read_limit_fallbacks_total{tenant="tenant-c"}')).toBeGreaterThanOrEqual(1);
    await sluice.waitForLog((l) => l.msg === 'the read bucket in Redis did not answer; this instance limits reads on its own until it does', 5_000);
  });
});
