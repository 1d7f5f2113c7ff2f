import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { FinishedSeries, OverviewPoint } from '../../src/api/console/overview.js';
import { postgresProxy, type PostgresProxy } from '../support/postgres-proxy.js';
import { ADMIN_KEY, TENANT_A_KEY, eventually, freePort, http, startSluice, testNamespace, waitForStatus, writeTestConfig, type SluiceProcess } from './harness.js';

interface Overview {
  points: OverviewPoint[];
  finished: FinishedSeries;
}

/**
 * The Overview in the production layout: the API in a process of its own, the processor and the
 * status sink in another. The API's Postgres goes through a TCP hop the test cuts (never the
 * machine's Postgres itself).
 */
describe('the console Overview with the processor in another process', () => {
  const namespace = testNamespace('overview');
  let proxy: PostgresProxy;
  let apiProcess: SluiceProcess;
  let workers: SluiceProcess;
  let api: string;
  let cookie: string;

  const overview = async (): Promise<Overview> => {
    const res = await http(`${api}/console/api/overview`, { headers: { cookie } });
    expect(res.status).toBe(200);
    return res.body as Overview;
  };

  beforeAll(async () => {
    proxy = await postgresProxy(inject('infra').databaseUrl);
    const [apiPort, simPort] = [await freePort(), await freePort()];
    const configPath = writeTestConfig({ api: { port: apiPort, console: { sampleMs: 1_000 } }, simulator: { port: simPort, anthropicLatencyMs: 100, anthropicJitterMs: 20 } });
    apiProcess = await startSluice({ configPath, roles: 'api', namespace, env: { DATABASE_URL: proxy.url } });
    workers = await startSluice({ configPath, roles: 'provider-sim,status-sink,processor', namespace, env: { SLUICE_OPS_PORT: String(await freePort()) } });
    api = `http://127.0.0.1:${apiPort}`;
    const login = await fetch(`${api}/console/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin: api },
      body: JSON.stringify({ key: ADMIN_KEY }),
      signal: AbortSignal.timeout(10_000),
    });
    expect(login.status).toBe(200);
    cookie = login.headers.getSetCookie()[0]!.split(';')[0]!;
  });

  afterAll(async () => {
    await workers?.stop();
    await apiProcess?.stop();
    await proxy?.close().catch(() => undefined);
  });

  it("charts the other process's finished runs and their end-to-end times, from Postgres", async () => {
    const runs = await Promise.all([1, 2, 3].map((i) => http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow: 'support-reply', input: { orderId: String(i) }, deadlineMs: 60_000 } })));
    expect(runs.map((r) => r.status)).toEqual([202, 202, 202]);
    for (const r of runs) await waitForStatus(api, r.body.runId, TENANT_A_KEY, ['completed']);
    const shown = await eventually(
      async () => {
        const o = await overview();
        // Runs per second times the bucket's second: runs finished (other files' runs may add to them).
        const completed = o.finished.points.reduce((sum, p) => sum + (p.finished.completed ?? 0), 0);
        return completed >= 3 ? o : undefined;
      },
      15_000,
      'the three completed runs on the Overview',
      500,
    );
    expect(shown.finished.unavailable).toBeNull();
    expect(shown.finished.points).toHaveLength(900);
    expect(shown.finished.points.some((p) => (p.p50.interactive ?? 0) > 0 && (p.p99.interactive ?? 0) >= (p.p50.interactive ?? 0))).toBe(true);
    // The admissions are this API process's own, charted at its next sample (every `sampleMs`),
    // which may come after the runs have finished and been read from Postgres.
    await eventually(async () => ((await overview()).points.some((p) => (p.admission.admitted ?? 0) > 0) ? true : undefined), 5_000, 'the admissions on the Overview', 250);
  });

  it('still answers while its Postgres is cut: the admission charts, and the finished runs last read, marked unavailable', async () => {
    const before = await overview();
    await proxy.cut();
    try {
      const during = await eventually(
        async () => {
          const started = Date.now();
          const o = await overview();
          // A read in flight holds a request 1 s at most.
          expect(Date.now() - started).toBeLessThan(3_000);
          return o.finished.unavailable !== null ? o : undefined;
        },
        15_000,
        'the Overview to mark the finished runs unavailable',
        500,
      );
      expect(during.points.length).toBeGreaterThanOrEqual(before.points.length);
      expect(during.finished.asOf).not.toBeNull();
      expect(during.finished.points).toHaveLength(900);
    } finally {
      await proxy.restore();
    }
    await eventually(async () => ((await overview()).finished.unavailable === null ? true : undefined), 15_000, 'the finished runs to come back', 500);
  });
});
