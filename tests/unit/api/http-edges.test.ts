import { connect } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApiServer, type ApiDeps } from '../../../src/api/server.js';
import { loadConfig } from '../../../src/config/load.js';
import { createLogger } from '../../../src/obs/logger.js';
import { fakeRunStatus } from '../../support/run-status-fakes.js';
import { KEY_A, NOW, expectProblem } from './run-status-app.js';
import { fakeBreakerAdmin } from '../../support/breaker-admin-fakes.js';

const unused = async (): Promise<never> => {
  throw new Error('not reached by these requests');
};

/**
 * Requests refused before any route runs — by the router, or by Node's HTTP parser — still get
 * the contract's problem+json, and the parser's refusals say the connection closes.
 */
let app: FastifyInstance;
let port: number;

beforeAll(async () => {
  const fake = fakeRunStatus();
  app = buildApiServer({
    config: loadConfig({ env: {} }),
    logger: createLogger('silent'),
    metrics: fake.metrics,
    readiness: [],
    runStatus: { ...fake.deps, heartbeatMs: 60_000, pollMs: 60_000 },
    reads: fake.reads,
    producer: { publishRunRequested: unused },
    runs: { recordAdmission: unused, getRun: fake.deps.runs.getRun },
    admission: { decide: unused, withdraw: unused, redisUnreachable: () => { throw new Error('not reached'); } },
    idempotency: { claim: unused, store: unused, forget: unused },
    withdrawals: { markAnswerPending: unused, markAnswered: unused, withdraw: unused },
    limits: { overrides: async () => new Map(), set: async () => undefined },
    breakers: fakeBreakerAdmin().deps,
    audit: createLogger('silent'),
    now: () => NOW,
  } satisfies ApiDeps);
  await app.listen({ host: '127.0.0.1', port: 0 });
  port = (app.server.address() as { port: number }).port;
});

afterAll(async () => {
  await app.close();
});

/** Writes raw bytes and reads until the server closes the connection. */
function raw(request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let answer = '';
    socket.on('data', (c: Buffer) => (answer += c.toString('latin1')));
    socket.on('close', () => resolve(answer));
    socket.on('error', reject);
    socket.setTimeout(5_000, () => socket.destroy(new Error('no answer')));
    socket.end(request);
  });
}

function parse(answer: string): { status: number; headers: string; body: Record<string, unknown> } {
  const [head, body] = answer.split('\r\n\r\n');
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head!)?.[1]), headers: head!.toLowerCase(), body: JSON.parse(body!) as Record<string, unknown> };
}

describe('the router refuses in the contract shape', () => {
  it('a path that is not valid percent-encoding → 400 invalid_request', async () => {
    const res = await app.inject({ method: 'GET', url: '/v1/runs/%E0%A4%A', headers: { authorization: KEY_A } });
    expectProblem(res, 400, 'invalid_request');
    expect(res.headers['x-request-id']).toBeTruthy();
  });

  it('a run id longer than any id → 404 not_found, as any unknown id', async () => {
    const res = await app.inject({ method: 'GET', url: `/v1/runs/${'a'.repeat(500)}`, headers: { authorization: KEY_A } });
    expectProblem(res, 404, 'not_found');
  });
});

describe('query strings', () => {
  it('a repeated lastEventId is no event id → 400 naming /query/lastEventId', async () => {
    const res = await app.inject({ method: 'GET', url: '/v1/runs/0190f5a2-7c00-7abc-8def-0123456789ab/events?lastEventId=1&lastEventId=2', headers: { authorization: KEY_A } });
    const body = expectProblem(res, 400, 'invalid_request');
    expect(body.errors).toEqual([{ path: '/query/lastEventId', message: 'must be string' }]);
  });
});

describe("Node's parser refuses in the contract shape", () => {
  it('a header section over the limit → 431 headers_too_large, Connection: close', async () => {
    const res = parse(await raw(`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`));
    expect(res.status).toBe(431);
    expect(res.headers).toContain('content-type: application/problem+json');
    expect(res.headers).toContain('connection: close');
    expect(res.body).toMatchObject({ status: 431, code: 'headers_too_large', retryable: false });
    expect(typeof res.body.requestId).toBe('string');
  });

  it('bytes that are not HTTP → 400 invalid_request, Connection: close', async () => {
    const res = parse(await raw('NOT HTTP AT ALL\r\n\r\n'));
    expect(res.status).toBe(400);
    expect(res.headers).toContain('connection: close');
    expect(res.body).toMatchObject({ status: 400, code: 'invalid_request' });
  });
});
