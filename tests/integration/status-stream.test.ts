import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { RUN_EVENTS_CHANNEL } from '../../src/status/run-store.js';
import { readStatusStream, type StreamReadOptions } from '../support/sse.js';
import { ADMIN_KEY, TENANT_A_KEY, TENANT_B_KEY, eventually, freePort, http, startSluice, testNamespace, waitForStatus, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * Status for callers: the SSE progress stream and cancellation, with the processor in its own
 * process so a run can be cancelled while no processor is running.
 */
describe('run status stream (SSE) and cancellation', () => {
  let front: SluiceProcess;
  let processor: SluiceProcess | undefined;
  let api: string;
  let sim: string;
  let configPath: string;
  let namespace: string;
  let db: pg.Pool;

  const ensureProcessor = async () => {
    if (processor) return;
    processor = await startSluice({ configPath, roles: 'processor', namespace });
    await processor.waitForLog((l) => l.msg === 'partitions assigned', 60_000);
  };
  const setLlmLatency = async (latencyMs: number) => expect((await http(`${sim}/admin/faults`, { method: 'PUT', key: ADMIN_KEY, json: { target: 'anthropic', latencyMs, jitterMs: 0 } })).status).toBe(200);
  const submit = async (key = TENANT_A_KEY) => {
    const r = await http(`${api}/v1/runs`, { method: 'POST', key, json: { workflow: 'support-reply', input: { orderId: '42' }, deadlineMs: 120_000 } });
    expect(r.status).toBe(202);
    return r.body.runId as string;
  };
  const cancel = (runId: string, key = TENANT_A_KEY) => http(`${api}/v1/runs/${runId}`, { method: 'DELETE', key });
  const storedEvents = async (runId: string) =>
    (await db.query<{ sequence: string; status: string }>('SELECT sequence, status FROM run_events WHERE run_id = $1 ORDER BY sequence', [runId])).rows.map((r) => ({ sequence: Number(r.sequence), status: r.status }));

  const readStream = (runId: string, opts: Omit<StreamReadOptions, 'key'> & { key?: string } = {}) => readStatusStream(`${api}/v1/runs/${runId}/events`, { ...opts, key: opts.key ?? TENANT_A_KEY });

  const sequencesOf = (events: { sequence: number }[]) => events.map((e) => e.sequence);

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    namespace = testNamespace('sse');
    configPath = writeTestConfig({
      api: { port: apiPort },
      simulator: { port: simPort, anthropicLatencyMs: 0, anthropicJitterMs: 0 },
      kafka: { partitions: { interactive: 2, batch: 2, status: 2 } },
      processor: { shutdownGraceMs: 1_000 },
    });
    front = await startSluice({ configPath, roles: 'provider-sim,status-sink,api', namespace });
    api = `http://127.0.0.1:${apiPort}`;
    sim = `http://127.0.0.1:${simPort}`;
    db = new pg.Pool({ connectionString: inject('infra').databaseUrl, max: 2 });
  });

  afterAll(async () => {
    await db?.end();
    if (processor) expect(await processor.stop()).toBe(0);
    // The API role holds the feed's LISTEN connection and any open streams: all must close.
    expect(await front?.stop()).toBe(0);
    expect(front.logs.filter((l) => l.msg === 'error while stopping a role')).toEqual([]);
  });

  it('cancels a queued run before any processor starts it: no LLM or tool call is made', async () => {
    expect(processor).toBeUndefined();
    expect((await http(`${sim}/admin/stats/reset`, { method: 'POST', key: ADMIN_KEY })).status).toBe(204);
    const runId = await submit();

    const cancelled = await cancel(runId);
    expect(cancelled.status).toBe(202);
    expect(cancelled.body).toEqual({ runId, status: 'queued', cancelRequested: true });
    expect((await cancel(runId)).status).toBe(202);

    await ensureProcessor();
    const done = await waitForStatus(api, runId, TENANT_A_KEY, ['completed', 'failed', 'expired', 'cancelled'], 60_000);
    expect(done.status).toBe('cancelled');
    expect(done.statusMessage).toMatch(/before it started/);
    expect(done.error).toBeUndefined();
    expect(done.startedAt).toBeUndefined();

    const stats = (await http(`${sim}/admin/stats`, { key: ADMIN_KEY })).body;
    expect(stats.calls).toEqual({});
    const stream = await readStream(runId);
    expect(stream.events.map((e) => e.status)).toEqual(['queued', 'cancelled']);
    expect(stream.ended).toBe(true);
  });

  it('streams every transition of a run in order, live, and ends after the terminal one', async () => {
    await ensureProcessor();
    // Slow enough that the stream is open while the transitions happen.
    await setLlmLatency(400);
    const listener = new pg.Client({ connectionString: inject('infra').databaseUrl });
    const notified: string[] = [];
    listener.on('notification', (m) => notified.push(m.payload ?? ''));
    await listener.connect();
    await listener.query(`LISTEN ${RUN_EVENTS_CHANNEL}`);
    try {
      const runId = await submit();
      const stream = await readStream(runId);

      expect(stream.status).toBe(200);
      expect(stream.headers.get('content-type')).toMatch(/^text\/event-stream/);
      expect(stream.headers.get('cache-control')).toBe('no-cache');
      expect(stream.headers.get('x-accel-buffering')).toBe('no');
      expect(stream.ended).toBe(true);
      expect(stream.events.map((e) => `${e.sequence}:${e.status}:${e.step ?? ''}`)).toEqual(['0:queued:', '1001:running:understand', '1002:running:lookup-order', '1003:running:reply', '1999:completed:']);
      const seqs = sequencesOf(stream.events);
      expect(seqs.every((s, i) => i === 0 || s > seqs[i - 1]!)).toBe(true);
      expect(sequencesOf(await storedEvents(runId))).toEqual(seqs);
      const last = stream.events.at(-1)!;
      expect(last).toMatchObject({ runId, attempt: 1 });
      expect((last.result as { text: string }).text).toContain('Simulated reply');
      expect(Number.isNaN(Date.parse(last.occurredAt))).toBe(false);
      // The sink announced the commits, which is what wakes streams without polling.
      expect(notified).toContain(runId);
    } finally {
      await listener.end();
      await setLlmLatency(0);
    }
  });

  it('resumes after a dropped connection from Last-Event-ID without losing or repeating an event', async () => {
    await ensureProcessor();
    await setLlmLatency(1_500);
    try {
      const runId = await submit();
      const first = await readStream(runId, { stopWhen: (events) => events.some((e) => e.status === 'running') });
      expect(first.ended).toBe(false);
      const lastSeen = first.events.at(-1)!.sequence;
      // Let transitions happen while no one is connected.
      await eventually(async () => ((await storedEvents(runId)).some((e) => e.sequence > lastSeen) ? true : undefined), 30_000, 'a transition after the drop');

      const second = await readStream(runId, { lastEventId: lastSeen });
      expect(second.ended).toBe(true);
      expect(second.events[0]!.sequence).toBeGreaterThan(lastSeen);
      const union = [...first.events, ...second.events];
      expect(new Set(sequencesOf(union)).size).toBe(union.length);
      expect(union.map((e) => ({ sequence: e.sequence, status: e.status }))).toEqual(await storedEvents(runId));
      expect(union.at(-1)!.status).toBe('completed');

      // Once everything was seen, a reconnect gets 204: EventSource clients stop there.
      expect((await readStream(runId, { lastEventId: union.at(-1)!.sequence })).status).toBe(204);
    } finally {
      await setLlmLatency(0);
    }
  });

  it("refuses to cancel a finished run (409) and hides another tenant's run (404)", async () => {
    await ensureProcessor();
    const runId = await submit();
    await waitForStatus(api, runId, TENANT_A_KEY, ['completed'], 30_000);

    const finished = await cancel(runId);
    expect(finished.status).toBe(409);
    expect(finished.headers.get('content-type')).toContain('application/problem+json');
    expect(finished.body).toMatchObject({ code: 'run_finished', status: 409, retryable: false });

    const foreign = await cancel(runId, TENANT_B_KEY);
    expect(foreign.status).toBe(404);
    expect(foreign.body).toMatchObject({ code: 'not_found' });
    expect((await readStream(runId, { key: TENANT_B_KEY })).status).toBe(404);
  });
});
