import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { formatSseComment, formatSseEvent } from '../../../src/api/sse.js';
import { ResponseTooLargeError, SluiceClient, SluiceHttpError, SluiceRefusal, SseEventTooLargeError, type RunEvent, type RunStatus } from '../../../src/client/index.js';

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/** The n-th request (from 0) this server has seen is answered by `handler`. */
type Handler = (req: IncomingMessage, res: ServerResponse, n: number) => void;

const servers: http.Server[] = [];

afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
});

async function serve(handler: Handler): Promise<{ client: (opts?: Partial<ConstructorParameters<typeof SluiceClient>[0]>) => SluiceClient; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body });
      handler(req, res, seen.length - 1);
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  return { client: (opts = {}) => new SluiceClient({ baseUrl, apiKey: 'key-a', timeoutMs: 2_000, reconnect: { baseDelayMs: 5 }, ...opts }), seen };
}

const accepted = (res: ServerResponse, headers: Record<string, string> = {}, admission = 'admitted') =>
  res.writeHead(202, { 'content-type': 'application/json', ...headers }).end(JSON.stringify({ runId: 'run-1', status: 'queued', admission, deadline: '2026-01-01T00:00:00.000Z', links: { self: '/v1/runs/run-1', events: '/v1/runs/run-1/events' } }));

function problem(res: ServerResponse, status: number, code: string, extra: Record<string, unknown> = {}, retryAfter?: string): void {
  const headers: Record<string, string> = { 'content-type': 'application/problem+json' };
  if (retryAfter !== undefined) headers['retry-after'] = retryAfter;
  res.writeHead(status, headers).end(JSON.stringify({ type: `urn:sluice:problem:${code}`, title: code, status, code, requestId: 'req-9', retryable: status === 429 || status === 503, ...extra }));
}

const event = (sequence: number, status: RunStatus = 'running'): RunEvent => ({ runId: 'run-1', sequence, status, message: `${status} ${sequence}`, step: null, attempt: 1, occurredAt: '2026-01-01T00:00:00.000Z' });
const frame = (e: RunEvent) => formatSseEvent({ id: e.sequence, event: 'status', data: JSON.stringify(e) });
const openStream = (res: ServerResponse) => res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });

async function collect(events: AsyncIterable<RunEvent>): Promise<number[]> {
  const sequences: number[] = [];
  for await (const e of events) sequences.push(e.sequence);
  return sequences;
}

async function refusalOf(p: Promise<unknown>): Promise<SluiceRefusal> {
  await expect(p).rejects.toBeInstanceOf(SluiceRefusal);
  return (await p.catch((e: unknown) => e)) as SluiceRefusal;
}

const submitBody = { workflow: 'support-reply', input: { orderId: '42' } };

describe('SluiceClient.submit', () => {
  it('sends the run with the key and a generated Idempotency-Key, and returns the typed 202', async () => {
    const { client, seen } = await serve((_, res) => accepted(res, { location: '/v1/runs/run-1' }));
    const run = await client().submit({ ...submitBody, class: 'batch' });
    expect(run).toMatchObject({ runId: 'run-1', admission: 'admitted', queued: false, idempotentReplayed: false });
    expect(seen[0]!).toMatchObject({ method: 'POST', url: '/v1/runs' });
    expect(seen[0]!.headers.authorization).toBe('Bearer key-a');
    expect(seen[0]!.headers['idempotency-key']).toMatch(/^[0-9a-f-]{36}$/);
    expect(run.idempotencyKey).toBe(seen[0]!.headers['idempotency-key']);
    expect(JSON.parse(seen[0]!.body)).toEqual({ ...submitBody, class: 'batch' });
  });

  it('tells a queued admission and a replayed answer', async () => {
    const { client, seen } = await serve((_, res) => accepted(res, { 'idempotent-replayed': 'true' }, 'queued'));
    const run = await client().submit({ ...submitBody, idempotencyKey: 'my-key' });
    expect(run).toMatchObject({ queued: true, idempotentReplayed: true, idempotencyKey: 'my-key' });
    expect(seen[0]!.headers['idempotency-key']).toBe('my-key');
  });

  it('maps a problem document to a SluiceRefusal, and anything else to a SluiceHttpError', async () => {
    const { client } = await serve((_, res, n) => {
      if (n === 0) return problem(res, 400, 'invalid_request', { detail: 'bad input', retryable: false, errors: [{ path: '/input', message: 'too deep' }, 'junk'] });
      res.writeHead(502, { 'content-type': 'text/html' }).end('<h1>Bad Gateway</h1>');
    });
    const refusal = await refusalOf(client().submit(submitBody));
    expect(refusal).toMatchObject({ status: 400, code: 'invalid_request', detail: 'bad input', requestId: 'req-9', retryable: false, retryAfterSec: undefined, errors: [{ path: '/input', message: 'too deep' }] });
    expect(refusal.message).toBe('400 invalid_request: bad input');
    const err = await client().submit(submitBody).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SluiceHttpError);
    expect(err).not.toBeInstanceOf(SluiceRefusal);
    expect(err).toMatchObject({ status: 502, body: '<h1>Bad Gateway</h1>' });
  });

  it('takes the longer of Retry-After and retryAfterSec, and reads an HTTP-date Retry-After', async () => {
    const { client } = await serve((_, res, n) => {
      if (n === 0) return problem(res, 429, 'rate_limited', { retryAfterSec: 3 }, '2');
      problem(res, 503, 'overloaded', {}, new Date(Date.now() + 5_000).toUTCString());
    });
    expect((await refusalOf(client().submit(submitBody))).retryAfterSec).toBe(3);
    expect((await refusalOf(client().submit(submitBody))).retryAfterSec).toBeGreaterThanOrEqual(4);
  });

  it('does not retry unless asked', async () => {
    const { client, seen } = await serve((_, res) => problem(res, 429, 'rate_limited', { retryAfterSec: 0 }, '0'));
    expect((await refusalOf(client().submit(submitBody))).code).toBe('rate_limited');
    expect(seen).toHaveLength(1);
  });

  it("waits at least the server's Retry-After, then retries with the same Idempotency-Key", async () => {
    const at: number[] = [];
    const { client, seen } = await serve((_, res, n) => {
      at.push(Date.now());
      if (n === 0) return problem(res, 429, 'rate_limited', { retryAfterSec: 1 }, '1');
      accepted(res);
    });
    const run = await client().submit({ ...submitBody, retry: { maxAttempts: 3, maxWaitMs: 5_000 } });
    expect(run.runId).toBe('run-1');
    expect(seen).toHaveLength(2);
    expect(at[1]! - at[0]!).toBeGreaterThanOrEqual(1_000);
    expect(new Set(seen.map((s) => s.headers['idempotency-key'])).size).toBe(1);
    expect(seen[1]!.body).toBe(seen[0]!.body);
  });

  it('stops at maxAttempts and throws the last refusal', async () => {
    const { client, seen } = await serve((_, res) => problem(res, 503, 'overloaded', { retryAfterSec: 0 }, '0'));
    expect((await refusalOf(client().submit({ ...submitBody, retry: { maxAttempts: 3, maxWaitMs: 5_000 } }))).code).toBe('overloaded');
    expect(seen).toHaveLength(3);
    expect(new Set(seen.map((s) => s.headers['idempotency-key'])).size).toBe(1);
  });

  it('does not retry when the wait would pass maxWaitMs or the deadline, nor a refusal that is not retryable', async () => {
    const { client, seen } = await serve((_, res, n) => {
      if (n < 2) return problem(res, 429, 'rate_limited', { retryAfterSec: 2 }, '2');
      problem(res, 409, 'idempotency_key_reused', { retryable: false });
    });
    const started = Date.now();
    await refusalOf(client().submit({ ...submitBody, retry: { maxAttempts: 5, maxWaitMs: 1_000 } }));
    await refusalOf(client().submit({ ...submitBody, deadlineMs: 1_500, retry: { maxAttempts: 5, maxWaitMs: 60_000 } }));
    expect((await refusalOf(client().submit({ ...submitBody, retry: { maxAttempts: 5, maxWaitMs: 60_000 } }))).code).toBe('idempotency_key_reused');
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(seen).toHaveLength(3);
  });

  it("times out a call that gets no answer, and stops at the caller's abort, a retry's wait included", async () => {
    const { client, seen } = await serve((_, res, n) => {
      if (n === 1) problem(res, 429, 'rate_limited', { retryAfterSec: 5 }, '5');
      void res;
    });
    await expect(client({ timeoutMs: 100 }).get('run-1')).rejects.toMatchObject({ name: 'TimeoutError' });
    const caller = new AbortController();
    setTimeout(() => caller.abort(new Error('caller gave up')), 100);
    await expect(client().submit({ ...submitBody, retry: { maxAttempts: 2, maxWaitMs: 10_000 }, signal: caller.signal })).rejects.toThrow('caller gave up');
    expect(seen).toHaveLength(2);
  });

  it('refuses retry bounds that make no sense', async () => {
    const { client, seen } = await serve((_, res) => accepted(res));
    await expect(client().submit({ ...submitBody, retry: { maxAttempts: 0, maxWaitMs: 0 } })).rejects.toThrow(RangeError);
    expect(seen).toHaveLength(0);
  });
});

describe('SluiceClient.get and cancel', () => {
  it('reads and cancels a run by its path', async () => {
    const { client, seen } = await serve((req, res) => {
      const body = req.method === 'GET' ? { runId: 'a/b', status: 'running' } : { runId: 'a/b', status: 'running', cancelRequested: true };
      res.writeHead(req.method === 'GET' ? 200 : 202, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
    expect(await client().get('a/b')).toMatchObject({ status: 'running' });
    expect(await client().cancel('a/b')).toEqual({ runId: 'a/b', status: 'running', cancelRequested: true });
    expect(seen.map((s) => `${s.method} ${s.url}`)).toEqual(['GET /v1/runs/a%2Fb', 'DELETE /v1/runs/a%2Fb']);
  });
});

describe('SluiceClient.events', () => {
  it('yields status events and ends after the terminal one, skipping comments and other events', async () => {
    const { client, seen } = await serve((_, res) => {
      openStream(res);
      res.write(formatSseComment('waiting for the next status'));
      res.write(frame(event(1, 'queued')) + formatSseEvent({ id: 1, event: 'other', data: 'x' }) + frame(event(2)));
      res.write(formatSseComment('keepalive') + frame(event(3, 'completed')));
      // The stream stays open: the client must stop on its own after the terminal status.
    });
    expect(await collect(client().events('run-1'))).toEqual([1, 2, 3]);
    expect(seen[0]!).toMatchObject({ url: '/v1/runs/run-1/events' });
    expect(seen[0]!.headers.accept).toBe('text/event-stream');
    expect(seen[0]!.headers['last-event-id']).toBeUndefined();
  });

  it('resumes with Last-Event-ID after the server drops the connection mid-event, and yields each event once', async () => {
    const { client, seen } = await serve((_, res, n) => {
      openStream(res);
      if (n === 0) {
        res.write(frame(event(1, 'queued')) + frame(event(2)));
        // Half an event, then the connection is gone.
        res.write(frame(event(3)).slice(0, 20), () => res.socket?.destroy());
        return;
      }
      res.end(frame(event(3)) + frame(event(4, 'failed')));
    });
    expect(await collect(client().events('run-1'))).toEqual([1, 2, 3, 4]);
    expect(seen.map((s) => s.headers['last-event-id'])).toEqual([undefined, '2']);
  });

  it('resumes after a stream the server ended early, and starts after a given lastEventId', async () => {
    const { client, seen } = await serve((_, res, n) => {
      openStream(res);
      res.end(n === 0 ? frame(event(6)) : frame(event(7, 'cancelled')));
    });
    expect(await collect(client().events('run-1', { lastEventId: 5 }))).toEqual([6, 7]);
    expect(seen.map((s) => s.headers['last-event-id'])).toEqual(['5', '6']);
  });

  it('ends when the server has nothing left to send (204)', async () => {
    const { client } = await serve((_, res) => res.writeHead(204).end());
    expect(await collect(client().events('run-1', { lastEventId: 9 }))).toEqual([]);
  });

  it('reconnects after a silence longer than the timeout', async () => {
    const { client, seen } = await serve((_, res, n) => {
      openStream(res);
      if (n === 0) return res.write(frame(event(1)));
      res.end(frame(event(2, 'completed')));
    });
    expect(await collect(client({ timeoutMs: 150 }).events('run-1'))).toEqual([1, 2]);
    expect(seen).toHaveLength(2);
  });

  it('gives up after a bounded number of reconnects in a row', async () => {
    const { client, seen } = await serve((req) => req.socket.destroy());
    await expect(collect(client({ reconnect: { maxReconnects: 3, baseDelayMs: 1 } }).events('run-1'))).rejects.toThrow('lost 3 times in a row');
    expect(seen).toHaveLength(4);
  });

  it("waits out a retryable refusal's Retry-After before reconnecting, and throws any other refusal at once", async () => {
    const at: number[] = [];
    const { client, seen } = await serve((req, res, n) => {
      at.push(Date.now());
      if (req.url!.includes('missing')) return problem(res, 404, 'not_found', { retryable: false });
      if (n === 0) return problem(res, 429, 'rate_limited', { retryAfterSec: 1 }, '1');
      openStream(res);
      res.end(frame(event(1, 'completed')));
    });
    expect(await collect(client().events('run-1'))).toEqual([1]);
    expect(at[1]! - at[0]!).toBeGreaterThanOrEqual(1_000);
    expect((await refusalOf(collect(client().events('missing')))).code).toBe('not_found');
    expect(seen).toHaveLength(3);
  });

  it('rejects an event over the size bound without reconnecting', async () => {
    const { client, seen } = await serve((_, res) => {
      openStream(res);
      res.write(frame({ ...event(1), message: 'x'.repeat(5_000) }));
    });
    await expect(collect(client({ maxEventBytes: 1_024 }).events('run-1'))).rejects.toThrow(SseEventTooLargeError);
    expect(seen).toHaveLength(1);
  });

  it('closes the connection when the caller stops early', async () => {
    let closed: Promise<void> | undefined;
    const { client } = await serve((req, res) => {
      closed = new Promise((resolve) => req.socket.once('close', () => resolve()));
      openStream(res);
      res.write(frame(event(1)) + frame(event(2)));
    });
    for await (const e of client().events('run-1')) if (e.sequence === 1) break;
    await closed;
  });
});

describe('SluiceClient.waitForResult', () => {
  it('follows the events to the terminal status and returns the run as read afterwards', async () => {
    const { client, seen } = await serve((req, res) => {
      if (req.url!.endsWith('/events')) {
        openStream(res);
        return res.write(frame(event(1)) + frame(event(2, 'completed')));
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ runId: 'run-1', status: 'completed', result: { text: 'done' } }));
    });
    expect(await client().waitForResult('run-1', { timeoutMs: 2_000 })).toMatchObject({ status: 'completed', result: { text: 'done' } });
    expect(seen.map((s) => s.url)).toEqual(['/v1/runs/run-1/events', '/v1/runs/run-1']);
  });

  it('gives up at its timeout while the run goes on', async () => {
    const { client } = await serve((_, res) => {
      openStream(res);
      res.write(frame(event(1)));
    });
    await expect(client().waitForResult('run-1', { timeoutMs: 200 })).rejects.toMatchObject({ name: 'TimeoutError' });
  });
});

/** What a huge body cost: bytes the server's socket took, bytes the client read, and whether the server saw its connection close. */
interface BodyCost {
  sent: number;
  read: number;
  closed: Promise<void>;
}

const HUGE_BYTES = 64 * 1024 * 1024;
const MiB = 1024 * 1024;

/**
 * Answers `status` with a body of HUGE_BYTES: `start`, then spaces in 64 KiB chunks, written only
 * as fast as the client takes them, until the body ends or the connection closes.
 */
function hugeBody(cost: BodyCost, status: number, contentType: string, start: string): Handler {
  return (req, res) => {
    cost.closed = new Promise((resolve) => req.socket.once('close', () => resolve()));
    res.writeHead(status, { 'content-type': contentType });
    const padding = Buffer.alloc(64 * 1024, 0x20);
    cost.sent = Buffer.byteLength(start);
    res.write(start);
    const pump = () => {
      while (cost.sent < HUGE_BYTES && !res.destroyed) {
        cost.sent += padding.length;
        if (!res.write(padding)) return void res.once('drain', pump);
      }
      res.end();
    };
    pump();
  };
}

/** fetch, counting the body bytes the client pulls through it into `cost.read`. */
const countingFetch =
  (cost: BodyCost): typeof fetch =>
  async (input, init) => {
    const res = await fetch(input, init);
    if (!res.body) return res;
    const counter = new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, out) {
        cost.read += chunk.byteLength;
        out.enqueue(chunk);
      },
    });
    return new Response(res.body.pipeThrough(counter), { status: res.status, statusText: res.statusText, headers: res.headers });
  };

async function hugeAnswer(status: number, contentType: string, start = ''): Promise<{ client: (opts?: Partial<ConstructorParameters<typeof SluiceClient>[0]>) => SluiceClient; cost: BodyCost }> {
  const cost: BodyCost = { sent: 0, read: 0, closed: Promise.resolve() };
  const { client } = await serve(hugeBody(cost, status, contentType, start));
  return { client: (opts = {}) => client({ fetch: countingFetch(cost), ...opts }), cost };
}

describe('SluiceClient response bodies', () => {
  /** The most read past the limit: the chunks in flight when it was reached. */
  const SLACK = 1 * MiB;

  it('reads no more of an error body than maxResponseBytes, and closes the connection on the rest', async () => {
    const limit = 256 * 1024;
    const { client, cost } = await hugeAnswer(503, 'application/problem+json', '{"code":"overloaded","retryable":true,"detail":"');
    const err = await client({ maxResponseBytes: limit })
      .get('run-1')
      .catch((e: unknown) => e);
    // A problem document cut short is no problem document: the status and the start of the body are kept.
    expect(err).toBeInstanceOf(SluiceHttpError);
    expect(err).not.toBeInstanceOf(SluiceRefusal);
    expect((err as SluiceHttpError).status).toBe(503);
    expect((err as SluiceHttpError).body.startsWith('{"code":"overloaded"')).toBe(true);
    expect(cost.read).toBeGreaterThanOrEqual(limit);
    expect(cost.read).toBeLessThan(limit + SLACK);
    await cost.closed;
    expect(cost.sent).toBeLessThan(HUGE_BYTES / 2);
  });

  it('fails a success body over the default 4 MiB with ResponseTooLargeError, reading no more than that', async () => {
    const { client, cost } = await hugeAnswer(200, 'application/json', '{"runId":"run-1","status":"completed","result":"');
    const err = await client()
      .get('run-1')
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ResponseTooLargeError);
    expect(err).toMatchObject({ status: 200, limitBytes: 4 * MiB });
    expect(cost.read).toBeLessThan(4 * MiB + SLACK);
    await cost.closed;
    expect(cost.sent).toBeLessThan(HUGE_BYTES / 2);
  });

  it("bounds an event stream's error body too", async () => {
    const limit = 64 * 1024;
    const { client, cost } = await hugeAnswer(500, 'text/html', '<html>');
    const err = await collect(client({ maxResponseBytes: limit }).events('run-1')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SluiceHttpError);
    expect((err as SluiceHttpError).status).toBe(500);
    expect(cost.read).toBeLessThan(limit + SLACK);
    await cost.closed;
    expect(cost.sent).toBeLessThan(HUGE_BYTES / 2);
  });

  it('reads a body of exactly maxResponseBytes, and refuses one byte more', async () => {
    const run = JSON.stringify({ runId: 'run-1', status: 'completed' });
    const limit = 1_024;
    const { client } = await serve((req, res) => {
      // JSON allows trailing whitespace: the body is padded to the limit, or one byte past it.
      const bytes = req.url!.endsWith('/over') ? limit + 1 : limit;
      res.writeHead(200, { 'content-type': 'application/json' }).end(run.padEnd(bytes, ' '));
    });
    expect(await client({ maxResponseBytes: limit }).get('run-1')).toMatchObject({ runId: 'run-1', status: 'completed' });
    await expect(client({ maxResponseBytes: limit }).get('over')).rejects.toBeInstanceOf(ResponseTooLargeError);
  });

  it('refuses a maxResponseBytes that bounds nothing', () => {
    for (const maxResponseBytes of [0, -1, 1.5, Number.NaN]) expect(() => new SluiceClient({ baseUrl: 'http://127.0.0.1:1', apiKey: 'k', maxResponseBytes })).toThrow(/maxResponseBytes/);
  });
});
