import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { readStatusStream } from '../support/sse.js';
import { TENANT_A_KEY, TENANT_B_KEY, freePort, http, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * With the admission row written behind the 202 and held for up to a second, a read right after
 * the 202 must still find the run (from the queue), and a stop must write what is queued.
 */
describe('read-your-writes with the admission row written behind (api.admissionRows)', () => {
  let sluice: SluiceProcess;
  let api: string;
  let db: pg.Pool;
  const stored = async (runId: string) => (await db.query<{ status: string }>('SELECT status FROM runs WHERE run_id = $1', [runId])).rows[0]?.status;
  const submit = async (headers: Record<string, string> = {}) => {
    const r = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, headers, json: { workflow: 'support-reply', input: { orderId: '42' } } });
    expect(r.status).toBe(202);
    return r.body as { runId: string; deadline: string };
  };

  beforeAll(async () => {
    db = new pg.Pool({ connectionString: inject('infra').databaseUrl, max: 1 });
    const apiPort = await freePort();
    // No processor: the runs stay queued, so only the admission row can answer for them.
    sluice = await startSluice({
      configPath: writeTestConfig({ api: { port: apiPort, admissionRows: { writeBehind: true, batchSize: 500, maxWaitMs: 1_000 } } }),
      roles: 'api',
      namespace: testNamespace('ryw'),
    });
    api = `http://127.0.0.1:${apiPort}`;
  });

  afterAll(async () => {
    await sluice?.stop();
    await db?.end();
  });

  it('a GET and the event stream right after the 202 find the run while its row is still queued', async () => {
    const { runId, deadline } = await submit();
    const got = await http(`${api}/v1/runs/${runId}`, { key: TENANT_A_KEY });
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ runId, status: 'queued', statusMessage: 'queued: admitted, waiting for a processor', workflow: 'support-reply', deadline, attempts: 0 });
    expect(await stored(runId)).toBeUndefined();
    expect((await http(`${api}/v1/runs/${runId}`, { key: TENANT_B_KEY })).status).toBe(404);

    const stream = await readStatusStream(`${api}/v1/runs/${runId}/events`, { key: TENANT_A_KEY, timeoutMs: 10_000, stopWhen: (events) => events.length > 0 });
    expect(stream.status).toBe(200);
    expect(stream.events[0]).toMatchObject({ runId, sequence: 0, status: 'queued' });

    // Written within maxWaitMs, and read the same from Postgres.
    await expect.poll(() => stored(runId), { timeout: 5_000 }).toBe('queued');
    expect((await http(`${api}/v1/runs/${runId}`, { key: TENANT_A_KEY })).body).toEqual(got.body);
  });

  it('an idempotent resubmit answers the original run, which reads back', async () => {
    const key = `ryw-replay-${Date.now()}`;
    const original = await submit({ 'idempotency-key': key });
    const replay = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, headers: { 'idempotency-key': key }, json: { workflow: 'support-reply', input: { orderId: '42' } } });
    expect(replay.status).toBe(202);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.runId).toBe(original.runId);
    expect((await http(`${api}/v1/runs/${original.runId}`, { key: TENANT_A_KEY })).status).toBe(200);
  });

  it('a stop writes the rows still queued before the process exits', async () => {
    const runIds = await Promise.all(Array.from({ length: 5 }, async () => (await submit()).runId));
    expect(await sluice.stop()).toBe(0);
    for (const runId of runIds) expect(await stored(runId)).toBe('queued');
  });
});
