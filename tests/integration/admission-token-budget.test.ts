import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { redisKeys } from '../../src/redis/keys.js';
import { ADMIN_KEY, TENANT_A_KEY, TENANT_B_KEY, eventually, freePort, http, startSluice, testNamespace, waitForStatus, writeTestConfig, type HttpResult, type SluiceProcess } from './harness.js';

/**
 * Token budgets at the door, through the API: a run takes its workflow's estimated tokens from its
 * tenant's budget; when the budget cannot cover the next run, 429 token_budget_exhausted with the
 * real time until it can.
 */
describe('token budgets at admission', () => {
  const namespace = testNamespace('tokbud');
  const keys = redisKeys(namespace);
  let api: SluiceProcess;
  let url: string;
  let redis: Redis;

  beforeAll(async () => {
    const port = await freePort();
    // 500 tokens per second into a budget of 3 000; each run is assumed to use 1 000 tokens.
    const tokenBudget = { tokensPerMinute: 30_000, burstTokens: 3_000 };
    const config = writeTestConfig({
      api: { port },
      tenants: { 'tenant-a': { admission: { tokenBudget } }, 'tenant-b': { admission: { tokenBudget } } },
      workflows: { 'support-reply': { tokenPrior: 1_000 } },
      admission: { stateRefreshMs: 100 },
    });
    api = await startSluice({ configPath: config, roles: 'api', namespace });
    url = `http://127.0.0.1:${port}`;
    redis = new Redis(inject('infra').redisUrl);
  });

  afterAll(async () => {
    if (api) expect(await api.stop()).toBe(0);
    redis?.disconnect();
  });

  const submit = (key: string) => http(`${url}/v1/runs`, { method: 'POST', key, json: { workflow: 'support-reply', input: { q: 'where is my order' } } });
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  function expectBudgetRefusal(r: HttpResult, retryAfterSec: number): void {
    expect(r.status).toBe(429);
    expect(r.headers.get('content-type')).toContain('application/problem+json');
    expect(r.body).toMatchObject({ code: 'token_budget_exhausted', retryable: true, retryAfterSec });
    expect(r.headers.get('retry-after')).toBe(String(retryAfterSec));
  }

  it('admits what the budget covers at the prior, then 429 with the time until it covers one more, then admits again', async () => {
    const admitted: HttpResult[] = [];
    for (let i = 0; i < 3; i++) admitted.push(await submit(TENANT_A_KEY));
    expect(admitted.map((r) => r.status)).toEqual([202, 202, 202]);
    // Empty: 1 000 tokens at 500/s are 2 s away.
    const refused = await submit(TENANT_A_KEY);
    expectBudgetRefusal(refused, 2);
    await sleep(2_000);
    expect((await submit(TENANT_A_KEY)).status).toBe(202);
  });

  it('uses the measured tokens per run once enough runs were measured, read through the periodic refresh', async () => {
    await redis.hset(keys.tokenEstimate('support-reply'), { per_run: '2500', samples: '5' });
    await sleep(400);
    expect((await submit(TENANT_B_KEY)).status).toBe(202);
    // 500 left; 2 000 more at 500/s: 4 s.
    expectBudgetRefusal(await submit(TENANT_B_KEY), 4);
  });

  it('counts the refusals in the admissions metric with their reason', async () => {
    const metrics = await http(`${url}/metrics`, { key: ADMIN_KEY });
    const text = String(metrics.body);
    expect(text).toMatch(/sluice_admission_total\{[^}]*tenant="tenant-a"[^}]*reason="token_budget_exhausted"[^}]*\} 1/);
    expect(text).toMatch(/sluice_admission_total\{[^}]*tenant="tenant-b"[^}]*reason="token_budget_exhausted"[^}]*\} 1/);
  });
});

describe('token budgets settled by the processor', () => {
  const namespace = testNamespace('tokset');
  const keys = redisKeys(namespace);
  let sluice: SluiceProcess;
  let url: string;
  let redis: Redis;

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    // Refill of 1 token/s: the budget barely moves by itself during the test.
    const config = writeTestConfig({
      api: { port: apiPort },
      simulator: { port: simPort, anthropicLatencyMs: 0, anthropicJitterMs: 0 },
      tenants: { 'tenant-a': { admission: { tokenBudget: { tokensPerMinute: 60, burstTokens: 100_000 } } } },
      workflows: { 'support-reply': { tokenPrior: 50_000 } },
      processor: { shutdownGraceMs: 1_000 },
    });
    sluice = await startSluice({ configPath: config, roles: 'provider-sim,status-sink,api,processor', namespace });
    await sluice.waitForLog((l) => l.msg === 'partitions assigned', 60_000);
    url = `http://127.0.0.1:${apiPort}`;
    redis = new Redis(inject('infra').redisUrl);
  });

  afterAll(async () => {
    if (sluice) expect(await sluice.stop()).toBe(0);
    redis?.disconnect();
  });

  it('a completed run gives its reservation back, pays what it used, and measures its workflow', async () => {
    const r = await http(`${url}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow: 'support-reply', input: { orderId: '42' }, deadlineMs: 60_000 } });
    expect(r.status).toBe(202);
    // The reservation (the prior) is out while the run waits or runs.
    expect(Number(await redis.hget(keys.tokenBudget('tenant-a'), 'tokens'))).toBeLessThanOrEqual(50_100);
    const done = await waitForStatus(url, r.body.runId, TENANT_A_KEY, ['completed', 'failed', 'expired', 'cancelled'], 60_000);
    expect(done.status).toBe('completed');
    const estimate = await eventually(async () => {
      const h = await redis.hgetall(keys.tokenEstimate('support-reply'));
      return h.samples ? h : undefined;
    }, 10_000, 'the workflow estimate');
    expect(estimate.samples).toBe('1');
    const used = Number(estimate.per_run);
    expect(used).toBeGreaterThan(0);
    const left = Number(await redis.hget(keys.tokenBudget('tenant-a'), 'tokens'));
    // Full budget minus what the run used, plus at most a minute of refill at 1/s.
    expect(left).toBeGreaterThanOrEqual(100_000 - used);
    expect(left).toBeLessThanOrEqual(Math.min(100_000, 100_000 - used + 60));
  });
});
