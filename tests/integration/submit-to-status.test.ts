import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scrapeMetrics, ADMIN_KEY, TENANT_A_KEY, TENANT_B_KEY, freePort, http, startSluice, testNamespace, waitForStatus, writeTestConfig, type SluiceProcess } from './harness.js';

/** The walking skeleton end to end: HTTP → Avro on Kafka → processor → status topic → Postgres → GET. */
describe('submit → event → processor → status (all roles in one process)', () => {
  let sluice: SluiceProcess;
  let api: string;

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    sluice = await startSluice({
      configPath: writeTestConfig({ api: { port: apiPort }, simulator: { port: simPort } }),
      roles: 'provider-sim,status-sink,processor,api',
      namespace: testNamespace('e2e'),
    });
    api = `http://127.0.0.1:${apiPort}`;
  });

  afterAll(async () => {
    expect(await sluice?.stop()).toBe(0);
  });

  it('completes a support-reply run with the simulated LLM text in its result', async () => {
    const submitted = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow: 'support-reply', input: { message: 'Where is order 42?', orderId: '42' } } });
    expect(submitted.status).toBe(202);
    expect(submitted.body).toMatchObject({ status: 'queued', admission: 'admitted', links: { self: `/v1/runs/${submitted.body.runId}` } });
    expect(submitted.headers.get('location')).toBe(`/v1/runs/${submitted.body.runId}`);

    // Readable right after the 202, before any processor has touched it.
    const first = await http(`${api}/v1/runs/${submitted.body.runId}`, { key: TENANT_A_KEY });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ runId: submitted.body.runId, workflow: 'support-reply', class: 'interactive' });
    expect(first.body.deadline).toBe(submitted.body.deadline);

    const done = await waitForStatus(api, submitted.body.runId, TENANT_A_KEY, ['completed', 'failed', 'expired'], 20_000);
    expect(done.status).toBe('completed');
    expect(done.attempts).toBe(1);
    expect(typeof done.startedAt).toBe('string');
    expect(typeof done.finishedAt).toBe('string');
    expect(done.result.text).toContain('Simulated reply');
    expect(done.result.steps.find((s: { id: string }) => s.id === 'lookup-order').output).toMatchObject({ orderId: '42' });
  });

  it('runs a batch-class report-digest through every step', async () => {
    const submitted = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_B_KEY, json: { workflow: 'report-digest', input: { request: 'weekly sales' } } });
    expect(submitted.status).toBe(202);
    const done = await waitForStatus(api, submitted.body.runId, TENANT_B_KEY, ['completed', 'failed', 'expired'], 20_000);
    expect(done.status).toBe('completed');
    expect(done.class).toBe('batch');
    expect(done.result.steps.map((s: { id: string }) => s.id)).toEqual(['plan', 'report-sales', 'report-refunds', 'summarize', 'push']);
  });

  it("hides another tenant's run", async () => {
    const submitted = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow: 'support-reply', input: {} } });
    expect(submitted.status).toBe(202);
    const other = await http(`${api}/v1/runs/${submitted.body.runId}`, { key: TENANT_B_KEY });
    expect(other.status).toBe(404);
    expect(other.headers.get('content-type')).toContain('application/problem+json');
  });

  describe('bad input gets the right problem+json', () => {
    const post = (body: string, headers: Record<string, string> = {}, key: string | null = TENANT_A_KEY) =>
      http(`${api}/v1/runs`, { method: 'POST', key: key ?? undefined, body, headers: { 'content-type': 'application/json', ...headers } });

    const expectProblem = (r: Awaited<ReturnType<typeof post>>, status: number, code: string) => {
      expect(r.status).toBe(status);
      expect(r.headers.get('content-type')).toContain('application/problem+json');
      expect(r.body).toMatchObject({ status, code, retryable: false });
      expect(typeof r.body.requestId).toBe('string');
      expect(r.body.requestId).toBe(r.headers.get('x-request-id'));
    };

    it('malformed JSON → 400 invalid_request', async () => {
      expectProblem(await post('{"workflow": "support-reply", '), 400, 'invalid_request');
    });

    it('missing fields → 400 listing each', async () => {
      const r = await post('{}');
      expectProblem(r, 400, 'invalid_request');
      expect(r.body.errors.map((e: { path: string }) => e.path).sort()).toEqual(['/input', '/workflow']);
    });

    it('wrong types → 400 listing each', async () => {
      const r = await post(JSON.stringify({ workflow: 7, input: {}, class: 'urgent', deadlineMs: '5000' }));
      expectProblem(r, 400, 'invalid_request');
      expect(r.body.errors.map((e: { path: string }) => e.path).sort()).toEqual(['/class', '/deadlineMs', '/workflow']);
    });

    it('unknown workflow → 400 unknown_workflow', async () => {
      expectProblem(await post(JSON.stringify({ workflow: 'no-such-flow', input: {} })), 400, 'unknown_workflow');
    });

    it('no key / wrong key → 401', async () => {
      expectProblem(await post(JSON.stringify({ workflow: 'support-reply', input: {} }), {}, null), 401, 'unauthorized');
      expectProblem(await post(JSON.stringify({ workflow: 'support-reply', input: {} }), {}, 'not-a-key'), 401, 'unauthorized');
    });

    it('admin key cannot submit runs → 403', async () => {
      expectProblem(await post(JSON.stringify({ workflow: 'support-reply', input: {} }), {}, ADMIN_KEY), 403, 'forbidden');
    });

    it('1 MiB body → 413, delivered to a client that is still uploading', async () => {
      const big = JSON.stringify({ workflow: 'support-reply', input: { blob: 'x'.repeat(1024 * 1024) } });
      // Several tries: answering before the upload ends used to reach the client only sometimes.
      for (let i = 0; i < 5; i++) expectProblem(await post(big), 413, 'payload_too_large');
    });
  });

  it('reports ready with Kafka, Redis and Postgres reachable, and exports metrics', async () => {
    const ready = await http(`${api}/readyz`);
    expect(ready.status).toBe(200);
    expect(ready.body.checks.map((c: { name: string; ok: boolean }) => [c.name, c.ok])).toEqual([
      ['kafka', true],
      ['redis', true],
      ['postgres', true],
    ]);
    const metrics = await scrapeMetrics(api).then((r) => r.text());
    expect(metrics).toMatch(/sluice_runs_submitted_total\{tenant="tenant-a",workflow="support-reply",class="interactive"\} [1-9]/);
    expect(metrics).toMatch(/sluice_runs_finished_total\{[^}]*status="completed"[^}]*\} [1-9]/);
  });
});
