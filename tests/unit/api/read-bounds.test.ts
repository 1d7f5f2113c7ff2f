import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { STREAM_RETRY_AFTER_SEC } from '../../../src/admission/read-limits.js';
import { buildApiServer, type ApiDeps } from '../../../src/api/server.js';
import { loadConfig } from '../../../src/config/load.js';
import { createLogger } from '../../../src/obs/logger.js';
import { metricValue } from '../../support/metric-value.js';
import { statusEventsOf } from '../../support/sse.js';
import { fakeRunStatus, type FakeRunStatus } from '../../support/run-status-fakes.js';
import { KEY_A, KEY_B, NOW, RUN_ID, event, expectProblem, runView } from './run-status-app.js';
import { fakeBreakerAdmin } from '../../support/breaker-admin-fakes.js';

const RUN_B = '0190f5a2-7c00-7abc-8def-0123456789bb';
const unused = async (): Promise<never> => {
  throw new Error('not part of reads');
};

let app: FastifyInstance | undefined;

afterEach(async () => {
  await app?.close();
  app = undefined;
});

/** The whole API server over the fake read model: reads go through server.ts's wiring. */
function server(opts: { maxStreams?: number; pollMs?: number } = {}): { fake: FakeRunStatus; app: FastifyInstance } {
  const fake = fakeRunStatus({ maxStreams: opts.maxStreams });
  app = buildApiServer({
    config: loadConfig({ env: {} }),
    logger: createLogger('silent'),
    metrics: fake.metrics,
    readiness: [],
    runStatus: { ...fake.deps, heartbeatMs: 60_000, pollMs: opts.pollMs ?? 60_000 },
    reads: fake.reads,
    producer: { publishRunRequested: unused },
    runs: { recordAdmission: unused, getRun: fake.deps.runs.getRun },
    admission: { decide: unused, withdraw: unused, redisUnreachable: () => { throw new Error('not used by reads'); } },
    idempotency: { claim: unused, store: unused, forget: unused },
    withdrawals: { markAnswerPending: unused, markAnswered: unused, withdraw: unused },
    limits: { overrides: async () => new Map(), set: async () => undefined },
    breakers: fakeBreakerAdmin().deps,
    audit: createLogger('silent'),
    now: () => NOW,
  } satisfies ApiDeps);
  return { fake, app };
}

type Read = 'GET' | 'events' | 'DELETE';
const READS: Read[] = ['GET', 'events', 'DELETE'];

function read(a: FastifyInstance, kind: Read, authorization = KEY_A, runId = RUN_ID): Promise<LightMyRequestResponse> {
  const url = kind === 'events' ? `/v1/runs/${runId}/events` : `/v1/runs/${runId}`;
  return a.inject({ method: kind === 'DELETE' ? 'DELETE' : 'GET', url, headers: { authorization } });
}

async function until(check: () => boolean, what: string, timeoutMs = 2_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const counter = (fake: FakeRunStatus, name: 'readRefusals' | 'readLimitFallbacks', labels: Record<string, string>) => metricValue(fake.metrics[name], labels);

describe('the read bucket', () => {
  it.each(READS)('%s over the bucket → 429 rate_limited with the real wait, and nothing is read', async (kind) => {
    const { fake, app } = server();
    fake.addRun('tenant-a', runView('running'), [event(0, 'queued'), event(1999, 'completed')]);
    fake.readBucket = { allowed: false, tokensLeft: 0.25, waitMs: 7_400 };

    const res = await read(app, kind);
    const body = expectProblem(res, 429, 'rate_limited');
    expect(body).toMatchObject({ retryable: true, retryAfterSec: 8 });
    expect(res.headers['retry-after']).toBe('8');
    expect(fake.getRunCalls).toBe(0);
    expect(fake.listEventsCalls).toBe(0);
    expect(fake.cancelRequests).toEqual([]);
    expect(await counter(fake, 'readRefusals', { tenant: 'tenant-a', reason: 'rate_limited' })).toBe(1);
  });

  it('takes one token per read of each kind', async () => {
    const { fake, app } = server();
    fake.addRun('tenant-a', runView('completed'), [event(0, 'queued'), event(1999, 'completed')]);
    for (const kind of READS) await read(app, kind);
    expect(fake.readTakes).toBe(3);
  });

  it('answers a bucket that never refills with an hour', async () => {
    const { fake, app } = server();
    fake.readBucket = { allowed: false, tokensLeft: 0, waitMs: -1 };
    expect(expectProblem(await read(app, 'GET'), 429, 'rate_limited').retryAfterSec).toBe(3600);
  });

  it('takes no token for an admin key: it is refused with 403 before', async () => {
    const { fake, app } = server();
    expectProblem(await read(app, 'GET', 'Bearer local-admin-key'), 403, 'forbidden');
    expect(fake.readTakes).toBe(0);
  });

  it.each(READS)('%s still answers while Redis is unreachable: this instance limits reads on its own', async (kind) => {
    const { fake, app } = server();
    fake.addRun('tenant-a', runView('queued'), [event(0, 'queued'), event(1999, 'completed')]);
    fake.readBucket = new Error('Connection is closed.');
    const res = await read(app, kind);
    expect([200, 202]).toContain(res.statusCode);
    expect(await counter(fake, 'readLimitFallbacks', { tenant: 'tenant-a' })).toBe(1);
  });
});

describe('reads while Postgres is unreachable', () => {
  it.each(READS)('%s → 503 dependency_unavailable, retryable with Retry-After, never a bare 500 or the error text', async (kind) => {
    const { fake, app } = server();
    fake.addRun('tenant-a', runView('running'), [event(0, 'queued')]);
    fake.postgresDown = true;
    const res = await read(app, kind);
    const body = expectProblem(res, 503, 'dependency_unavailable');
    expect(body).toMatchObject({ retryable: true, retryAfterSec: 3 });
    expect(res.headers['retry-after']).toBe('3');
    expect(res.body).not.toContain('ECONNREFUSED');
    expect(fake.cancelRequests).toEqual([]);
  });

  it('a stream whose first read of events fails → 503, and its feed subscription and stream slot are given back', async () => {
    const { fake, app } = server({ maxStreams: 1 });
    fake.addRun('tenant-a', runView('running'), [event(0, 'queued')]);
    const getRun = fake.deps.runs.getRun;
    fake.deps.runs.getRun = async (...args) => {
      const view = await getRun(...args);
      fake.postgresDown = true;
      return view;
    };
    expectProblem(await read(app, 'events'), 503, 'dependency_unavailable');
    expect(fake.reads.openStream('tenant-a').granted).toBe(true);
  });

  it('an open stream whose polls fail keeps going and sends what it missed once Postgres answers again', async () => {
    const { fake, app } = server({ pollMs: 10 });
    fake.addRun('tenant-a', runView('running'), [event(0, 'queued')]);
    const pending = read(app, 'events');
    await until(() => fake.listEventsCalls >= 1, 'the first read');
    fake.postgresDown = true;
    const failedFrom = fake.listEventsCalls;
    await until(() => fake.listEventsCalls >= failedFrom + 3, 'three failing polls');
    fake.append(event(1001, 'running'));
    fake.append(event(1999, 'completed'));
    fake.postgresDown = false;
    const res = await pending;
    expect(res.statusCode).toBe(200);
    expect(statusEventsOf(res.body).map((e) => e.sequence)).toEqual([0, 1001, 1999]);
  });
});

describe('event streams per tenant', () => {
  it('refuses a tenant its stream beyond maxStreams with 429 and a 5 s hint, while other tenants still get theirs', async () => {
    const { fake, app } = server({ maxStreams: 1 });
    await fake.feed.start();
    fake.addRun('tenant-a', runView('running'), [event(0, 'queued')]);
    fake.addRun('tenant-b', runView('running', { runId: RUN_B }), [event(0, 'queued', { runId: RUN_B })]);

    const open = read(app, 'events');
    await until(() => fake.listEventsCalls === 1, 'the first stream to open');
    const refused = await read(app, 'events');
    const body = expectProblem(refused, 429, 'rate_limited');
    expect(body.retryAfterSec).toBe(STREAM_RETRY_AFTER_SEC);
    expect(refused.headers['retry-after']).toBe(String(STREAM_RETRY_AFTER_SEC));
    expect(body.detail).toContain('event streams');
    expect(fake.listEventsCalls).toBe(1);
    expect(await counter(fake, 'readRefusals', { tenant: 'tenant-a', reason: 'streams_full' })).toBe(1);

    const other = read(app, 'events', KEY_B, RUN_B);
    await until(() => fake.listEventsCalls === 2, "the other tenant's stream to open");

    // GET and DELETE are not streams: they stay open to the tenant.
    expect((await read(app, 'GET')).statusCode).toBe(200);

    fake.append(event(1999, 'completed'));
    fake.append(event(1999, 'completed', { runId: RUN_B }));
    fake.connections[0]!.notify(RUN_ID);
    fake.connections[0]!.notify(RUN_B);
    expect((await open).statusCode).toBe(200);
    expect((await other).statusCode).toBe(200);
  });

  it('gives a slot back when its stream ends, and when the answer is 204', async () => {
    const { fake, app } = server({ maxStreams: 1 });
    await fake.feed.start();
    fake.addRun('tenant-a', runView('running'), [event(0, 'queued')]);
    const first = read(app, 'events');
    await until(() => fake.listEventsCalls === 1, 'the stream to open');
    fake.append(event(1999, 'completed'));
    fake.connections[0]!.notify(RUN_ID);
    expect((await first).statusCode).toBe(200);

    // Finished, nothing after the terminal event: 204, twice, so its slot was given back each time.
    fake.addRun('tenant-a', runView('completed'), [event(0, 'queued'), event(1999, 'completed')]);
    for (let i = 0; i < 2; i++) {
      const none = await app.inject({ method: 'GET', url: `/v1/runs/${RUN_ID}/events`, headers: { authorization: KEY_A, 'last-event-id': '1999' } });
      expect(none.statusCode).toBe(204);
    }
    expect(fake.reads.openStream('tenant-a').granted).toBe(true);
  });
});
