import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { redisKeys } from '../../src/redis/keys.js';
import { topicNames } from '../../src/kafka/topics.js';
import { scrapeMetrics, TENANT_A_KEY, TENANT_B_KEY, TENANT_C_KEY, freePort, http, startSluice, testNamespace, writeTestConfig, type HttpResult, type SluiceProcess } from './harness.js';
import { connectRedis, REDIS_BACKENDS, redisEnvOf } from './lua/redis-clients.js';
import type { RedisClient } from '../../src/redis/client.js';

/**
 * The overload contract at the door, with two API processes sharing Redis: limits hold across
 * instances because every decision that must be exact is one Lua script in Redis.
 */
const TENANT_D_KEY = 'test-key-d';
const TENANT_D_KEY_SHA256 = '351a1c2b68503ec33d48fedbc5c27af309677891eb8986ce6a0b6ed73feb2d4b';

describe.each(REDIS_BACKENDS)('admission control across two API instances (%s Redis)', (backend) => {
  const namespace = testNamespace('adm');
  const apis: SluiceProcess[] = [];
  const urls: string[] = [];
  let redis: RedisClient;
  let kafka: Kafka;

  beforeAll(async () => {
    const ports = [await freePort(), await freePort()];
    const config = (port: number) =>
      writeTestConfig({
        api: { port },
        tenants: {
          // Capacity 60 and practically no refill: the burst below must admit exactly 60.
          'tenant-a': { admission: { bucket: { capacity: 60, refillPerSec: 0.001 } } },
          'tenant-b': { admission: { mode: 'observe', bucket: { capacity: 5, refillPerSec: 0.001 } } },
          'tenant-c': { admission: { maxBacklog: 3 } },
          'tenant-d': { apiKeySha256: TENANT_D_KEY_SHA256, admission: { bucket: { capacity: 1, refillPerSec: 1 } } },
        },
        admission: { stateRefreshMs: 100 },
      });
    for (const port of ports) {
      apis.push(await startSluice({ configPath: config(port), roles: 'api', namespace, env: redisEnvOf(backend) }));
      urls.push(`http://127.0.0.1:${port}`);
    }
    redis = connectRedis(backend);
    kafka = new Kafka({ brokers: inject('infra').kafkaBrokers, logLevel: logLevel.NOTHING });
  });

  afterAll(async () => {
    for (const p of apis) expect(await p.stop()).toBe(0);
    redis?.disconnect();
  });

  const submit = (i: number, key: string, body: unknown, headers: Record<string, string> = {}) => http(`${urls[i % 2]}/v1/runs`, { method: 'POST', key, json: body, headers });
  const count = (rs: HttpResult[], status: number) => rs.filter((r) => r.status === status).length;

  async function eventsOn(topic: string): Promise<number> {
    const admin = kafka.admin();
    await admin.connect();
    try {
      const offsets = await admin.fetchTopicOffsets(topic);
      return offsets.reduce((n, p) => n + Number(p.high), 0);
    } finally {
      await admin.disconnect();
    }
  }

  it('a burst of 200 for a tenant with capacity 60 admits exactly 60 across both instances', async () => {
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => submit(i, TENANT_A_KEY, { workflow: 'support-reply', input: { n: i } })));
    expect(count(results, 202)).toBe(60);
    const refused = results.filter((r) => r.status === 429);
    expect(refused).toHaveLength(140);
    for (const r of refused) {
      expect(r.body).toMatchObject({ code: 'rate_limited', retryable: true });
      // The real time until one token exists at 0.001/s, rounded up: about 1000 s.
      expect(r.body.retryAfterSec).toBeGreaterThan(900);
      expect(r.headers.get('retry-after')).toBe(String(r.body.retryAfterSec));
    }
    // Both instances admitted some, so the limit held across them, not within one.
    const admittedBy = [0, 1].map((inst) => results.filter((r, i) => i % 2 === inst && r.status === 202).length);
    expect(admittedBy[0]! + admittedBy[1]!).toBe(60);
    expect(Math.min(...admittedBy)).toBeGreaterThan(0);
  });

  it('20 identical requests with one Idempotency-Key on two instances produce one event and one answer', async () => {
    const topic = topicNames(namespace).batch;
    const before = await eventsOn(topic);
    const body = { workflow: 'report-digest', input: { request: 'weekly' } };
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => submit(i, TENANT_B_KEY, body, { 'idempotency-key': 'digest-2026-11-29' })));
    expect(results.map((r) => r.status)).toEqual(Array(20).fill(202));
    expect(new Set(results.map((r) => r.body.runId)).size).toBe(1);
    expect(count(results.filter((r) => r.headers.get('idempotent-replayed') === 'true'), 202)).toBe(19);
    expect(await eventsOn(topic)).toBe(before + 1);

    const reused = await submit(0, TENANT_B_KEY, { ...body, input: { request: 'monthly' } }, { 'idempotency-key': 'digest-2026-11-29' });
    expect(reused.status).toBe(409);
    expect(reused.body.code).toBe('idempotency_key_reused');
  });

  it('observe-only mode admits everything but counts what it would have refused', async () => {
    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => submit(i, TENANT_B_KEY, { workflow: 'report-digest', input: { n: i } })));
    expect(results.map((r) => r.status)).toEqual(Array(10).fill(202));
    const metrics = (await Promise.all(urls.map((u) => scrapeMetrics(u).then((r) => r.text())))).join('\n');
    const observed = [...metrics.matchAll(/sluice_admission_observed_total\{tenant="tenant-b",class="batch",outcome="deferred",reason="rate_limited"\} (\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
    // Capacity 5 was spent by the idempotent request above plus 4 of these: 6 would-be refusals.
    expect(observed).toBe(6);
  });

  it('a tenant over its backlog bound is deferred with 429 tenant_backlog_full', async () => {
    const results: HttpResult[] = [];
    for (let i = 0; i < 4; i++) results.push(await submit(i, TENANT_C_KEY, { workflow: 'support-reply', input: { n: i } }));
    expect(results.slice(0, 3).map((r) => r.status)).toEqual([202, 202, 202]);
    expect(results[3]!.status).toBe(429);
    expect(results[3]!.body).toMatchObject({ code: 'tenant_backlog_full', retryable: true });
    expect(results[3]!.body.retryAfterSec).toBeGreaterThanOrEqual(1);
  });

  it('while a dependency is open: refuses interactive work it cannot serve, admits batch, halves the refill', async () => {
    const keys = redisKeys(namespace);
    const d = (i: number, body: unknown) => submit(i, TENANT_D_KEY, body);
    await redis.hset(keys.breaker('anthropic'), { state: 'open', retryAt: String(Date.now() + 60_000) });
    try {
      await new Promise((r) => setTimeout(r, 400)); // a few refresh intervals
      const interactive = await d(0, { workflow: 'support-reply', input: {}, deadlineMs: 30_000 });
      expect(interactive.status).toBe(503);
      expect(interactive.body.code).toBe('dependency_unavailable');
      expect(interactive.body.retryAfterSec).toBeGreaterThan(55);
      expect(interactive.body.retryAfterSec).toBeLessThanOrEqual(60);

      // Batch waits for the dependency instead: admitted, using the bucket's one token.
      expect((await d(1, { workflow: 'report-digest', input: {} })).status).toBe(202);
      // Refill 1/s halved by the emergency factor: the next token is 2 s away, not 1.
      const throttled = await d(0, { workflow: 'report-digest', input: {} });
      expect(throttled.status).toBe(429);
      expect(throttled.body.retryAfterSec).toBe(2);
    } finally {
      await redis.del(keys.breaker('anthropic'));
    }
    await new Promise((r) => setTimeout(r, 1_500)); // breaker state refreshed, bucket full again
    expect((await d(1, { workflow: 'report-digest', input: {} })).status).toBe(202);
    const normal = await d(0, { workflow: 'report-digest', input: {} });
    expect(normal.status).toBe(429);
    expect(normal.body.retryAfterSec).toBe(1);
  });
});
