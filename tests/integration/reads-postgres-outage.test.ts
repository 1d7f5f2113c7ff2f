import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { postgresProxy, type PostgresProxy } from '../support/postgres-proxy.js';
import { readStatusStream, type StatusEvent } from '../support/sse.js';
import { scrapeMetrics, TENANT_A_KEY, eventually, freePort, http, startSluice, testNamespace, waitForStatus, writeTestConfig, type HttpResult, type SluiceProcess } from './harness.js';

const TERMINAL = ['completed', 'failed', 'expired', 'cancelled', 'dead_lettered'];

/**
 * Reads of runs while Postgres is unreachable: Sluice reaches it through a TCP hop the test cuts
 * (never the machine's Postgres itself). Every read is answered `503 dependency_unavailable`, and
 * a stream opened before the cut keeps going and delivers the run's end once Postgres is back.
 */
describe('reads while Postgres is unreachable', () => {
  const namespace = testNamespace('reads-pg');
  let proxy: PostgresProxy;
  let sluice: SluiceProcess;
  let api: string;

  beforeAll(async () => {
    proxy = await postgresProxy(inject('infra').databaseUrl);
    const [apiPort, simPort] = [await freePort(), await freePort()];
    // Each LLM step takes 2 s, so the run is still going when the cut starts.
    const configPath = writeTestConfig({ api: { port: apiPort }, simulator: { port: simPort, anthropicLatencyMs: 2_000, anthropicJitterMs: 0 } });
    sluice = await startSluice({ configPath, roles: 'provider-sim,status-sink,processor,api', namespace, env: { DATABASE_URL: proxy.url } });
    api = `http://127.0.0.1:${apiPort}`;
  });

  afterAll(async () => {
    await sluice?.stop();
    await proxy?.close().catch(() => undefined);
  });

  it('answers every read 503 with Retry-After during the cut, and an open stream outlives it', async () => {
    const submitted = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow: 'support-reply', input: { orderId: '42' }, deadlineMs: 120_000 } });
    expect(submitted.status).toBe(202);
    const runId = submitted.body.runId as string;

    let seen: StatusEvent[] = [];
    const stream = readStatusStream(`${api}/v1/runs/${runId}/events`, { key: TENANT_A_KEY, timeoutMs: 90_000, stopWhen: (events) => ((seen = events), false) });
    // Cut only once the stream is open and has shown the run running: a stream whose first read
    // met the cut would have been refused, and there would be no open stream to outlive it.
    await eventually(async () => (seen.some((e) => e.status === 'running') ? true : undefined), 30_000, 'the open stream to show the run running');

    await proxy.cut();
    const answers: HttpResult[] = [];
    const cutUntil = Date.now() + 4_000;
    while (Date.now() < cutUntil) {
      answers.push(
        await http(`${api}/v1/runs/${runId}`, { key: TENANT_A_KEY }),
        await http(`${api}/v1/runs/${runId}/events`, { key: TENANT_A_KEY }),
        await http(`${api}/v1/runs/${runId}`, { method: 'DELETE', key: TENANT_A_KEY }),
      );
      await new Promise((r) => setTimeout(r, 250));
    }
    // Nothing in /metrics reads Postgres at scrape time; /readyz names the failing check.
    expect((await scrapeMetrics(api)).status).toBe(200);
    const notReady = await http(`${api}/readyz`);
    expect(notReady.status).toBe(503);
    expect(notReady.body.checks).toContainEqual({ name: 'postgres', ok: false });
    // The open stream's poll (every 2 s) failed meanwhile, and the stream was kept.
    await sluice.waitForLog((l) => l.msg === 'could not read run events; the next poll tries again' && l.runId === runId, 10_000);
    const seenDuringCut = seen.length;
    await proxy.restore();

    expect(answers.length).toBeGreaterThanOrEqual(6);
    for (const a of answers) {
      expect(a.status).toBe(503);
      expect(a.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(a.body).toMatchObject({ code: 'dependency_unavailable', retryable: true, retryAfterSec: 3 });
      expect(a.headers.get('retry-after')).toBe('3');
      expect(JSON.stringify(a.body)).not.toMatch(/ECONNREFUSED|127\.0\.0\.1|postgres/i);
    }

    const read = await stream;
    expect(read.status).toBe(200);
    expect(read.ended).toBe(true);
    expect(read.events.length).toBeGreaterThan(seenDuringCut);
    expect(read.events.at(-1)!.status).toBe('completed');
    const sequences = read.events.map((e) => e.sequence);
    expect(sequences).toEqual([...sequences].sort((x, y) => x - y));
    expect(new Set(sequences).size).toBe(sequences.length);

    const after = await waitForStatus(api, runId, TENANT_A_KEY, TERMINAL);
    expect(after.status).toBe('completed');
  }, 120_000);
});
