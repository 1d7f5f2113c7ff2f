import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisKeys } from '../../src/redis/keys.js';
import { scrapeMetrics, TENANT_A_KEY, TENANT_B_KEY, eventually, freePort, http, startSluice, testNamespace, writeTestConfig, type HttpResult, type SluiceProcess } from './harness.js';
import { startThrowawayRedis, type ThrowawayRedis } from '../support/throwaway-redis.js';

/**
 * The submit path against its own Redis, which the test stops and starts again empty: hostile
 * input is refused before it can take anything, and while Redis is away every submission gets
 * the outage policy's answer (503 overloaded with Retry-After, or the bounded local fallback),
 * never a 500. Kafka and Postgres are the shared ones.
 */
describe('submit path: input bounds and a Redis outage', () => {
  const namespace = testNamespace('submit-outage');
  const keys = redisKeys(namespace);
  const FAIL_OPEN_BOUND = 4;
  let redis: ThrowawayRedis;
  let closedApi: SluiceProcess;
  let openApi: SluiceProcess;
  let closedUrl: string;
  let openUrl: string;

  beforeAll(async () => {
    redis = await startThrowawayRedis();
    const [closedPort, openPort] = [await freePort(), await freePort()];
    const roomy = { admission: { bucket: { capacity: 1_000, refillPerSec: 100 } } };
    const tenants = { 'tenant-a': roomy, 'tenant-b': roomy };
    const env = { REDIS_URL: redis.url };
    closedApi = await startSluice({ configPath: writeTestConfig({ api: { port: closedPort }, tenants }), roles: 'api', namespace, env });
    openApi = await startSluice({
      configPath: writeTestConfig({
        api: { port: openPort },
        tenants,
        admission: { redisOutage: { policy: 'fail-open', localBucket: { capacity: 100, refillPerSec: 0 }, maxAdmittedPerOutage: FAIL_OPEN_BOUND } },
      }),
      roles: 'api',
      namespace,
      env,
    });
    closedUrl = `http://127.0.0.1:${closedPort}`;
    openUrl = `http://127.0.0.1:${openPort}`;
  });

  afterAll(async () => {
    for (const api of [closedApi, openApi]) if (api) expect(await api.stop()).toBe(0);
    await redis?.close();
  });

  const submit = (url: string, body: unknown, headers: Record<string, string> = {}, key = TENANT_A_KEY) => http(`${url}/v1/runs`, { method: 'POST', key, body: typeof body === 'string' ? body : JSON.stringify(body), headers: { 'content-type': 'application/json', ...headers } });
  const statuses = (rs: HttpResult[]) => rs.map((r) => r.status);

  async function backlogCounts(): Promise<number[]> {
    const client = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    try {
      return await Promise.all([keys.backlogAll(), keys.backlogTenant('tenant-a'), keys.backlogClass('interactive'), keys.backlogClass('batch')].map((k) => client.zcard(k)));
    } finally {
      client.disconnect();
    }
  }

  it('input nested 5,000 levels deep → 400 at /input, and the backlog is exactly as before', async () => {
    const before = await backlogCounts();
    const deep = `{"workflow":"support-reply","input":${'['.repeat(5_000)}${']'.repeat(5_000)}}`;
    const results = [await submit(closedUrl, deep), await submit(closedUrl, deep, { 'idempotency-key': 'deep-1' })];
    for (const r of results) {
      expect(r.status).toBe(400);
      expect(r.body).toMatchObject({ code: 'invalid_request', errors: [{ path: '/input' }] });
    }
    expect(await backlogCounts()).toEqual(before);
    // The same counters do move for a run that is admitted: nothing else hides a leak.
    expect((await submit(closedUrl, { workflow: 'support-reply', input: { n: 1 } })).status).toBe(202);
    expect((await backlogCounts()).slice(0, 3)).toEqual(before.slice(0, 3).map((n) => n + 1));
  });

  describe('while Redis is stopped', () => {
    beforeAll(async () => {
      await redis.stop();
    });

    it('fail-closed: every submission answers 503 overloaded with Retry-After, none 500', async () => {
      const requests = Array.from({ length: 24 }, (_, i) =>
        submit(closedUrl, { workflow: i % 2 ? 'support-reply' : 'report-digest', input: { n: i } }, i % 3 === 0 ? { 'idempotency-key': `down-${i}` } : {}, i % 4 ? TENANT_A_KEY : TENANT_B_KEY),
      );
      const results = await Promise.all(requests);
      expect(statuses(results)).toEqual(Array(24).fill(503));
      for (const r of results) {
        expect(r.headers.get('content-type')).toMatch(/^application\/problem\+json/);
        expect(r.body).toMatchObject({ code: 'overloaded', retryable: true });
        expect(r.body.retryAfterSec).toBeGreaterThanOrEqual(1);
        expect(r.headers.get('retry-after')).toBe(String(r.body.retryAfterSec));
      }
    });

    it(`fail-open: admits at most ${FAIL_OPEN_BOUND} runs through the local fallback, refuses keyed requests and the rest with 503`, async () => {
      const keyed = await Promise.all(Array.from({ length: 3 }, (_, i) => submit(openUrl, { workflow: 'support-reply', input: { k: i } }, { 'idempotency-key': `open-${i}` })));
      expect(statuses(keyed)).toEqual([503, 503, 503]);
      const results = await Promise.all(Array.from({ length: 10 }, (_, i) => submit(openUrl, { workflow: 'support-reply', input: { n: i } })));
      expect(statuses(results).filter((s) => s === 202)).toHaveLength(FAIL_OPEN_BOUND);
      expect(statuses(results).filter((s) => s === 503)).toHaveLength(10 - FAIL_OPEN_BOUND);
      for (const r of results.filter((x) => x.status === 202)) expect(r.body).toMatchObject({ status: 'queued', admission: 'admitted' });
      for (const r of [...keyed, ...results.filter((x) => x.status === 503)]) expect(r.body).toMatchObject({ code: 'overloaded', retryable: true });
    });

    it('after Redis comes back empty, submissions are admitted again and every outage decision was counted', async () => {
      await redis.start();
      for (const url of [closedUrl, openUrl]) {
        await eventually(async () => ((await submit(url, { workflow: 'support-reply', input: { back: true } })).status === 202 ? true : undefined), 20_000, `${url} to admit again`, 250);
      }
      const keyed = await submit(closedUrl, { workflow: 'support-reply', input: { again: 1 } }, { 'idempotency-key': 'after-outage' });
      expect(keyed.status).toBe(202);

      const scrape = async (url: string) => (await scrapeMetrics(url)).text();
      const counted = (text: string, policy: string, outcome: string) => Number(new RegExp(`sluice_admission_outage_decisions_total\\{dependency="redis",policy="${policy}",outcome="${outcome}"\\} (\\d+)`).exec(text)?.[1] ?? 0);
      const closedMetrics = await scrape(closedUrl);
      expect(counted(closedMetrics, 'fail-closed', 'refused')).toBeGreaterThanOrEqual(24);
      const openMetrics = await scrape(openUrl);
      expect(counted(openMetrics, 'fail-open', 'admitted')).toBe(FAIL_OPEN_BOUND);
      expect(counted(openMetrics, 'fail-open', 'idempotency_key_refused')).toBeGreaterThanOrEqual(3);
      expect(counted(openMetrics, 'fail-open', 'bound_reached')).toBeGreaterThanOrEqual(10 - FAIL_OPEN_BOUND);
      // Nothing answered 500 on either instance, during or after the outage.
      for (const text of [closedMetrics, openMetrics]) expect(text).not.toMatch(/sluice_http_requests_total\{route="\/v1\/runs",method="POST",status="500"[,}]/);
    });
  });
});
