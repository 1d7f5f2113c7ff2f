import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { StepError } from '../../../src/steps/step-error.js';
import { ToolConnections } from '../../../src/steps/tool-connections.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

const TIMEOUTS = { connectMs: 1_000, readMs: 1_000, totalMs: 3_000 };

/** A tool server on loopback that counts the connections it accepts; each test sets its handler. */
let server: Server;
let baseUrl: string;
let handler: Handler;
let accepted: Socket[];
let connections: ToolConnections;

beforeEach(async () => {
  accepted = [];
  handler = (_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
  server = createServer((req, res) => {
    req.resume();
    req.on('end', () => handler(req, res));
  });
  server.on('connection', (s: Socket) => accepted.push(s));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  connections = new ToolConnections();
});

afterEach(async () => {
  connections.close();
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

const call = (path = '/tools/x', timeouts = TIMEOUTS) => connections.call({ dependency: 'x', url: new URL(`${baseUrl}${path}`), body: { q: 1 }, headers: {}, timeouts });

async function failure(p: Promise<unknown>): Promise<StepError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StepError);
  return err as StepError;
}

describe('ToolConnections', () => {
  it('sends one call after another over one kept-alive connection', async () => {
    for (let i = 0; i < 5; i++) expect(await call()).toEqual({ ok: true });
    expect(accepted).toHaveLength(1);
  });

  it('opens more connections only for calls in flight at once, and keeps them for later calls', async () => {
    handler = (_req, res) => setTimeout(() => res.writeHead(200).end('{}'), 50);
    await Promise.all([call(), call(), call()]);
    expect(accepted).toHaveLength(3);
    await Promise.all([call(), call(), call()]);
    expect(accepted).toHaveLength(3);
  });

  it('holds a call on a reused connection to the read budget', async () => {
    await call();
    handler = () => undefined;
    const started = Date.now();
    const err = await failure(call('/tools/x', { connectMs: 1_000, readMs: 150, totalMs: 3_000 }));
    expect(err.kind).toBe('read_timeout');
    expect(err.retryable).toBe(true);
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(accepted).toHaveLength(1);
  });

  it('leaves no timeout listener behind on a connection used many times', async () => {
    for (let i = 0; i < 30; i++) await call();
    expect(accepted).toHaveLength(1);
    // The server side sees the same single socket; the client side's listeners are what could pile up.
    const agentSockets = Object.values((connections as unknown as { pools: Map<string, { freeSockets: Record<string, Socket[]> }> }).pools.get(baseUrl)!.freeSockets).flat();
    expect(agentSockets).toHaveLength(1);
    expect(agentSockets[0]!.listenerCount('timeout')).toBeLessThanOrEqual(1);
  });

  it('drops a connection whose call timed out: the next call gets a new one', async () => {
    handler = () => undefined;
    await failure(call('/tools/x', { connectMs: 1_000, readMs: 100, totalMs: 3_000 }));
    handler = (_req, res) => res.writeHead(200).end('{"again":true}');
    expect(await call()).toEqual({ again: true });
    expect(accepted).toHaveLength(2);
  });

  it('ends a call at its total budget even while bytes keep coming', async () => {
    handler = (_req, res) => {
      res.writeHead(200);
      const drip = setInterval(() => res.write(' '), 20);
      res.on('close', () => clearInterval(drip));
    };
    const err = await failure(call('/tools/x', { connectMs: 1_000, readMs: 1_000, totalMs: 200 }));
    expect(err.kind).toBe('total_timeout');
  });

  it('answers a refused connection as a retryable connection failure', async () => {
    const port = (server.address() as AddressInfo).port;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const err = await failure(connections.call({ dependency: 'x', url: new URL(`http://127.0.0.1:${port}/tools/x`), body: {}, headers: {}, timeouts: TIMEOUTS }));
    expect(err.kind).toBe('connection');
    expect(err.retryable).toBe(true);
    // Listening again for afterEach to close.
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  });

  it('passes on a 503 with its Retry-After, and a non-JSON answer as not retryable', async () => {
    handler = (_req, res) => res.writeHead(503, { 'retry-after': '2' }).end('busy');
    const busy = await failure(call());
    expect([busy.kind, busy.status, busy.retryable, busy.retryAfterSec]).toEqual(['http_status', 503, true, 2]);
    handler = (_req, res) => res.writeHead(200).end('not json');
    const bad = await failure(call());
    expect([bad.kind, bad.retryable]).toEqual(['bad_response', false]);
    // Both answers were complete: the connection served them both.
    expect(accepted).toHaveLength(1);
  });

  it('closes idle connections after its idle time', async () => {
    connections.close();
    connections = new ToolConnections({ idleMs: 100 });
    await call();
    const [socket] = accepted;
    await new Promise<void>((resolve) => socket!.once('close', () => resolve()));
    await call();
    expect(accepted).toHaveLength(2);
  });

  it('closes its connections when closed', async () => {
    await call();
    const [socket] = accepted;
    const closed = new Promise<void>((resolve) => socket!.once('close', () => resolve()));
    connections.close();
    await closed;
  });
});
