import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { STREAM_LINGER_AFTER_DEADLINE_MS } from '../../../src/api/routes/run-events.js';
import { statusEventsOf, takeSseFrames } from '../../support/sse.js';
import { fakeRunStatus, type FakeRunStatus } from '../../support/run-status-fakes.js';
import { ADMIN, KEY_A, KEY_B, NOW, RUN_ID, event, expectProblem, runView, statusApp } from './run-status-app.js';

let current: FastifyInstance | undefined;

afterEach(async () => {
  await current?.close();
  current = undefined;
});

function setup(opts: Parameters<typeof statusApp>[1] & { maxSubscribers?: number } = {}): { fake: FakeRunStatus; app: FastifyInstance; metrics: ReturnType<typeof statusApp>['metrics'] } {
  const fake = fakeRunStatus({ maxSubscribers: opts.maxSubscribers });
  const built = statusApp(fake, opts);
  current = built.app;
  return { fake, ...built };
}

const get = (a: FastifyInstance, headers: Record<string, string> = { authorization: KEY_A }, url = `/v1/runs/${RUN_ID}/events`) => a.inject({ method: 'GET', url, headers });

/** Opens a stream over real HTTP, so the client can disconnect; resolves once the headers are in. */
async function openRealStream(a: FastifyInstance, headers: Record<string, string> = {}): Promise<{ status: number; received: () => string; close: () => void; ended: Promise<string> }> {
  await a.listen({ port: 0, host: '127.0.0.1' });
  const { port } = a.server.address() as AddressInfo;
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: `/v1/runs/${RUN_ID}/events`, headers: { authorization: KEY_A, ...headers } }, (res) => {
      let body = '';
      const ended = new Promise<string>((done) => {
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => done(body));
        res.on('close', () => done(body));
      });
      resolve({ status: res.statusCode ?? 0, received: () => body, close: () => req.destroy(), ended });
    });
    req.on('error', reject);
    req.end();
  });
}

async function until(check: () => boolean, what: string, timeoutMs = 2_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('GET /v1/runs/:id/events', () => {
  it('streams every transition of a finished run in order and ends after the terminal one', async () => {
    const { fake, app } = setup();
    const result = { text: 'hi', steps: [] };
    fake.addRun('tenant-a', runView('completed'), [event(0, 'queued'), event(1001, 'running', { step: 'understand' }), event(1999, 'completed', { result })]);

    const res = await get(app);
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/event-stream/);
    expect(res.headers['cache-control']).toBe('no-cache');
    expect(res.headers['x-accel-buffering']).toBe('no');
    const events = statusEventsOf(res.body);
    expect(events.map((e) => [e.sequence, e.status])).toEqual([
      [0, 'queued'],
      [1001, 'running'],
      [1999, 'completed'],
    ]);
    expect(events[1]).toEqual({ runId: RUN_ID, sequence: 1001, status: 'running', message: 'running 1001', step: 'understand', attempt: 1, occurredAt: new Date(NOW + 1001).toISOString() });
    expect(events[2]!.result).toEqual(result);
    expect(events[2]).not.toHaveProperty('error');
  });

  it('resumes after Last-Event-ID, and after ?lastEventId= on a first connect', async () => {
    const { fake, app } = setup();
    fake.addRun('tenant-a', runView('completed'), [event(0, 'queued'), event(1001, 'running'), event(1002, 'running'), event(1999, 'completed')]);

    const byHeader = await get(app, { authorization: KEY_A, 'last-event-id': '1001' });
    expect(statusEventsOf(byHeader.body).map((e) => e.sequence)).toEqual([1002, 1999]);
    const byQuery = await get(app, { authorization: KEY_A }, `/v1/runs/${RUN_ID}/events?lastEventId=0`);
    expect(statusEventsOf(byQuery.body).map((e) => e.sequence)).toEqual([1001, 1002, 1999]);
    // The header wins: it is what EventSource sends when it reconnects.
    const both = await get(app, { authorization: KEY_A, 'last-event-id': '1002' }, `/v1/runs/${RUN_ID}/events?lastEventId=0`);
    expect(statusEventsOf(both.body).map((e) => e.sequence)).toEqual([1999]);
  });

  it('answers 204 when a finished run has nothing after Last-Event-ID, so EventSource stops reconnecting', async () => {
    const { fake, app } = setup();
    fake.addRun('tenant-a', runView('completed'), [event(0, 'queued'), event(1999, 'completed')]);
    const res = await get(app, { authorization: KEY_A, 'last-event-id': '1999' });
    expect(res.statusCode).toBe(204);
    expect(res.body).toBe('');
  });

  it('answers 204 for a run stuck past its deadline and the grace after it', async () => {
    const deadline = NOW - STREAM_LINGER_AFTER_DEADLINE_MS - 1;
    const { fake, app } = setup();
    fake.addRun('tenant-a', runView('running', { deadline: new Date(deadline).toISOString() }), [event(0, 'queued'), event(1001, 'running')]);
    expect((await get(app, { authorization: KEY_A, 'last-event-id': '1001' })).statusCode).toBe(204);
    // Events it has not sent yet are still delivered before the stream closes.
    expect(statusEventsOf((await get(app, { authorization: KEY_A, 'last-event-id': '0' })).body).map((e) => e.sequence)).toEqual([1001]);
  });

  it('refuses an invalid Last-Event-ID with 400 naming where it came from', async () => {
    const { fake, app } = setup();
    fake.addRun('tenant-a', runView('running'), [event(0, 'queued')]);
    const header = expectProblem(await get(app, { authorization: KEY_A, 'last-event-id': 'abc' }), 400, 'invalid_request');
    expect(header.errors).toEqual([{ path: '/headers/last-event-id', message: expect.any(String) }]);
    const query = expectProblem(await get(app, { authorization: KEY_A }, `/v1/runs/${RUN_ID}/events?lastEventId=-5`), 400, 'invalid_request');
    expect(query.errors).toEqual([{ path: '/query/lastEventId', message: expect.any(String) }]);
  });

  it("hides another tenant's run and a malformed id as 404, and needs a tenant key", async () => {
    const { fake, app } = setup();
    fake.addRun('tenant-a', runView('running'), [event(0, 'queued')]);
    expectProblem(await get(app, { authorization: KEY_B }), 404, 'not_found');
    expectProblem(await get(app, { authorization: KEY_A }, '/v1/runs/not-a-run/events'), 404, 'not_found');
    expectProblem(await get(app, { authorization: ADMIN }), 403, 'forbidden');
    expect(fake.listEventsCalls).toBe(0);
  });

  it('delivers new events when the feed announces them, without polling', async () => {
    const { fake, app, metrics } = setup();
    await fake.feed.start();
    fake.addRun('tenant-a', runView('queued'), [event(0, 'queued')]);

    const pending = get(app);
    await until(() => fake.listEventsCalls === 1, 'the first read');
    expect((await metrics.sseStreams.get()).values[0]!.value).toBe(1);
    fake.append(event(1001, 'running'));
    fake.connections[0]!.notify(RUN_ID);
    await until(() => fake.listEventsCalls === 2, 'the read after the notification');
    // A notification for another run does not wake this stream.
    fake.connections[0]!.notify('0190f5a2-7c00-7abc-8def-000000000000');
    fake.append(event(1999, 'completed'));
    fake.connections[0]!.notify(RUN_ID);

    const res = await pending;
    expect(statusEventsOf(res.body).map((e) => e.sequence)).toEqual([0, 1001, 1999]);
    expect(fake.listEventsCalls).toBe(3);
    expect((await metrics.sseStreams.get()).values[0]!.value).toBe(0);
  });

  it('falls back to polling when a notification is lost, and sends keepalive comments meanwhile', async () => {
    const { fake, app } = setup({ pollMs: 30, heartbeatMs: 10 });
    fake.addRun('tenant-a', runView('running'), [event(0, 'queued')]);
    const pending = get(app);
    await until(() => fake.listEventsCalls >= 1, 'the first read');
    await new Promise((r) => setTimeout(r, 60));
    fake.append(event(1999, 'completed'));

    const res = await pending;
    expect(statusEventsOf(res.body).map((e) => e.sequence)).toEqual([0, 1999]);
    expect(takeSseFrames(res.body).frames.filter((f) => f.comments.includes('keepalive')).length).toBeGreaterThanOrEqual(2);
  });

  it('writes a comment at once when there is nothing to send yet, so the client sees the headers', async () => {
    const { fake, app } = setup();
    fake.addRun('tenant-a', runView('running'), [event(0, 'queued')]);
    const stream = await openRealStream(app, { 'last-event-id': '0' });
    expect(stream.status).toBe(200);
    await until(() => takeSseFrames(stream.received()).frames.length === 1, 'the first frame');
    expect(takeSseFrames(stream.received()).frames[0]!.comments).toEqual(['waiting for the next status']);
    stream.close();
  });

  it('closes the stream when the deadline and its grace have passed', async () => {
    const deadline = NOW - STREAM_LINGER_AFTER_DEADLINE_MS + 50;
    const { fake, app } = setup();
    fake.addRun('tenant-a', runView('running', { deadline: new Date(deadline).toISOString() }), [event(0, 'queued')]);
    const res = await get(app);
    expect(statusEventsOf(res.body).map((e) => e.sequence)).toEqual([0]);
  });

  it('refuses a stream beyond the bound with 503 overloaded, and frees the slot when a client leaves', async () => {
    const { fake, app } = setup({ maxSubscribers: 1 });
    fake.addRun('tenant-a', runView('running'), [event(0, 'queued')]);
    const first = await openRealStream(app);
    expect(first.status).toBe(200);

    const refused = await get(app);
    const body = expectProblem(refused, 503, 'overloaded');
    expect(body.retryAfterSec).toBe(5);
    expect(refused.headers['retry-after']).toBe('5');

    first.close();
    await first.ended;
    await until(() => fake.feed.subscribe(RUN_ID, () => undefined) !== undefined, 'the slot to be freed');
  });

  it('ends open streams when the server closes, instead of waiting for their runs', async () => {
    const { fake, app } = setup();
    fake.addRun('tenant-a', runView('running'), [event(0, 'queued')]);
    const stream = await openRealStream(app);
    const started = Date.now();
    await app.close();
    current = undefined;
    const body = await stream.ended;
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(statusEventsOf(body).map((e) => e.sequence)).toEqual([0]);
  });
});
