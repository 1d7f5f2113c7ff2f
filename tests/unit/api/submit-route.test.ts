import { createHash } from 'node:crypto';
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { buildApiServer } from '../../../src/api/server.js';
import { loadConfig } from '../../../src/config/load.js';
import type { SluiceConfig } from '../../../src/config/schema.js';
import type { RunRequested } from '../../../src/events/schemas.js';
import { createLogger } from '../../../src/obs/logger.js';
import { createMetrics, type Metrics } from '../../../src/obs/metrics.js';
import { MessageTooLargeError, ProduceQueueFullError, ProduceTimeoutError } from '../../../src/producers/produce-batcher.js';
import { isRunId } from '../../../src/runs/run-id.js';
import { canonicalJson } from '../../../src/util/canonical-json.js';
import type { AdmittedRun, RunView } from '../../../src/status/run-store.js';
import { fakeRunStatus } from '../../support/run-status-fakes.js';
import type { AdmissionRequest, OutageRequest } from '../../../src/admission/admission-controller.js';
import type { AdmissionDecision } from '../../../src/admission/admission-policy.js';
import type { IdempotencyClaim, StoredAnswer } from '../../../src/admission/idempotency.js';
import { fakeBreakerAdmin } from '../../support/breaker-admin-fakes.js';

const config = loadConfig({ env: {} });
const NOW = Date.UTC(2026, 0, 1, 12, 0, 0, 0);
const KEY_A = 'Bearer local-key-a';
const KEY_B = 'Bearer local-key-b';
const ADMIN = 'Bearer local-admin-key';
const INCOMING_TRACE = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const TRACEPARENT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

interface Harness {
  app: FastifyInstance;
  metrics: Metrics;
  published: Array<{ run: RunRequested; timeoutMs: number }>;
  admissions: AdmittedRun[];
  getRunCalls: Array<{ runId: string; tenantId: string }>;
  views: Map<string, { tenantId: string; view: RunView }>;
}

let current: Harness | undefined;

interface HarnessOptions {
  config?: SluiceConfig;
  publish?: (run: RunRequested) => Promise<void>;
  recordAdmission?: () => Promise<void>;
  decision?: AdmissionDecision;
  /** Replaces the fake decision; `take` records a backlog entry as the real store would. */
  decide?: (req: AdmissionRequest, take: () => void) => Promise<AdmissionDecision>;
  claim?: IdempotencyClaim | (() => Promise<IdempotencyClaim>);
  withdraw?: () => Promise<void>;
  store?: () => Promise<boolean>;
  forget?: () => Promise<boolean>;
  getRun?: () => Promise<RunView | undefined>;
  /** Replaces the tenant's read-bucket check, which routes leave to the error handler when it throws. */
  readTake?: () => Promise<never>;
  /** Replaces the mark that a refused run must not run should its event land after all. */
  markNotAcknowledged?: () => Promise<void>;
  /** Replaces the mark, written before the produce, that the run's answer is pending. */
  markAnswerPending?: () => Promise<void>;
}

/**
 * In-memory stand-ins for the Redis-backed admission and idempotency stores (their real behaviour
 * is tested against Redis). They keep the books a leak would show in: backlog entries held and
 * Idempotency-Key claims open.
 */
function admissionFakes(opts: HarnessOptions) {
  const withdrawn: string[] = [];
  const tokensReturned: Array<{ runId: string; tokens: number; deadline: number }> = [];
  const settled: Array<{ kind: 'store' | 'forget'; key: string; answer?: StoredAnswer }> = [];
  const held = new Set<string>();
  const openClaims = new Set<string>();
  const outages: OutageRequest[] = [];
  const marked: Array<{ runId: string; deadline: number }> = [];
  const decided: AdmissionRequest[] = [];
  const fingerprints: string[] = [];
  const admission = {
    decide: async (req: AdmissionRequest): Promise<AdmissionDecision> => {
      decided.push(req);
      const take = () => void held.add(req.runId);
      if (opts.decide) return opts.decide(req, take);
      const decision = opts.decision ?? { outcome: 'admitted', reason: 'capacity_available' };
      if (decision.outcome === 'admitted' || decision.outcome === 'queued') take();
      return decision;
    },
    withdraw: async (run: { runId: string }, reservation?: { tokens: number; deadline: number }) => {
      await opts.withdraw?.();
      withdrawn.push(run.runId);
      if (reservation) tokensReturned.push({ runId: run.runId, ...reservation });
      held.delete(run.runId);
    },
    redisUnreachable: (req: OutageRequest): AdmissionDecision => {
      outages.push(req);
      return { outcome: 'rejected', reason: 'overloaded', retryAfterSec: 2, redisOutage: true };
    },
  };
  const idempotency = {
    claim: async (_t: string, key: string, fingerprint: string): Promise<IdempotencyClaim> => {
      fingerprints.push(fingerprint);
      const claim = typeof opts.claim === 'function' ? await opts.claim() : (opts.claim ?? { kind: 'claimed', token: 't-1' });
      if (claim.kind === 'claimed') openClaims.add(key);
      return claim;
    },
    store: async (_t: string, key: string, _token: string, answer: StoredAnswer) => {
      const stored = opts.store ? await opts.store() : true;
      openClaims.delete(key);
      return settled.push({ kind: 'store', key, answer }) > 0 && stored;
    },
    forget: async (_t: string, key: string) => {
      const forgotten = opts.forget ? await opts.forget() : true;
      openClaims.delete(key);
      return settled.push({ kind: 'forget', key }) > 0 && forgotten;
    },
  };
  /** The answer marks and the produce, in the order they happened. */
  const timeline: string[] = [];
  const withdrawals = {
    markAnswerPending: async (runId: string, produceTimeoutMs: number) => {
      await opts.markAnswerPending?.();
      timeline.push(`pending ${runId} ${produceTimeoutMs}`);
    },
    markAnswered: async (runId: string) => void timeline.push(`answered ${runId}`),
    withdraw: async (runId: string, deadline: number) => {
      await opts.markNotAcknowledged?.();
      marked.push({ runId, deadline });
      timeline.push(`not_acknowledged ${runId}`);
    },
  };
  return { admission, idempotency, withdrawals, withdrawn, tokensReturned, settled, held, openClaims, outages, marked, decided, fingerprints, timeline };
}

let fakes: ReturnType<typeof admissionFakes>;

function harness(opts: HarnessOptions = {}): Harness {
  fakes = admissionFakes(opts);
  const published: Harness['published'] = [];
  const admissions: AdmittedRun[] = [];
  const getRunCalls: Harness['getRunCalls'] = [];
  const views: Harness['views'] = new Map();
  const metrics = createMetrics();
  const reads = fakeRunStatus().reads;
  if (opts.readTake) reads.take = opts.readTake;
  const app = buildApiServer({
    config: opts.config ?? config,
    logger: createLogger('silent'),
    metrics,
    readiness: [],
    runStatus: fakeRunStatus().deps,
    reads,
    limits: { overrides: async () => new Map(), set: async () => undefined },
    breakers: fakeBreakerAdmin().deps,
    audit: createLogger('silent'),
    now: () => NOW,
    admission: fakes.admission,
    idempotency: fakes.idempotency,
    withdrawals: fakes.withdrawals,
    producer: {
      publishRunRequested: async (run: RunRequested, timeoutMs: number) => {
        fakes.timeline.push(`publish ${run.runId}`);
        if (opts.publish) await opts.publish(run);
        published.push({ run, timeoutMs });
      },
    },
    runs: {
      recordAdmission: async (run: AdmittedRun) => {
        if (opts.recordAdmission) await opts.recordAdmission();
        admissions.push(run);
      },
      getRun: async (runId: string, tenantId: string) => {
        getRunCalls.push({ runId, tenantId });
        if (opts.getRun) return opts.getRun();
        const entry = views.get(runId);
        return entry && entry.tenantId === tenantId ? entry.view : undefined;
      },
    },
  });
  current = { app, metrics, published, admissions, getRunCalls, views };
  return current;
}

afterEach(async () => {
  await current?.app.close();
  current = undefined;
});

function submit(h: Harness, body: unknown, headers: Record<string, string> = {}, auth: string | null = KEY_A): Promise<LightMyRequestResponse> {
  const opts: InjectOptions = {
    method: 'POST',
    url: '/v1/runs',
    headers: { 'content-type': 'application/json', ...(auth ? { authorization: auth } : {}), ...headers },
    payload: typeof body === 'string' ? body : JSON.stringify(body),
  };
  return h.app.inject(opts);
}

/** Asserts the common problem shape and returns the parsed body. */
function expectProblem(res: LightMyRequestResponse, status: number, code: string, retryable = false) {
  expect(res.statusCode).toBe(status);
  expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
  const body = res.json();
  expect(body).toMatchObject({ type: `urn:sluice:problem:${code}`, status, code, retryable });
  expect(typeof body.requestId).toBe('string');
  expect(body.requestId.length).toBeGreaterThan(0);
  expect(body.requestId).toBe(res.headers['x-request-id']);
  return body as { errors?: Array<{ path: string; message: string }>; [k: string]: unknown };
}

const pathsOf = (body: { errors?: Array<{ path: string }> }) => (body.errors ?? []).map((e) => e.path).sort();

const VALID = { workflow: 'support-reply', input: { message: 'Where is order 123?' } };

describe('POST /v1/runs accepted', () => {
  it('answers 202 with the run, its deadline, links and a Location header', async () => {
    const h = harness();
    const res = await submit(h, VALID);
    expect(res.statusCode).toBe(202);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    const body = res.json();
    expect(isRunId(body.runId)).toBe(true);
    expect(body).toEqual({
      runId: body.runId,
      status: 'queued',
      admission: 'admitted',
      deadline: new Date(NOW + 30_000).toISOString(),
      links: { self: `/v1/runs/${body.runId}`, events: `/v1/runs/${body.runId}/events` },
    });
    expect(res.headers.location).toBe(`/v1/runs/${body.runId}`);
    // The id is a UUIDv7 carrying the admission time.
    expect(parseInt(body.runId.replace(/-/g, '').slice(0, 12), 16)).toBe(NOW);
  });

  it('publishes one event with the contract fields before answering', async () => {
    const h = harness();
    const res = await submit(h, VALID);
    expect(h.published).toHaveLength(1);
    const { run, timeoutMs } = h.published[0]!;
    expect(timeoutMs).toBe(config.kafka.produceTimeoutMs);
    expect(run).toEqual({
      runId: res.json().runId,
      tenantId: 'tenant-a',
      workflow: 'support-reply',
      class: 'interactive',
      admittedAt: NOW,
      deadline: NOW + 30_000,
      attempt: 1,
      traceparent: expect.stringMatching(TRACEPARENT),
      input: JSON.stringify(VALID.input),
      idempotencyKey: null,
      dueAt: null,
      tokenReservation: null,
      prepaidTurns: null,
    });
  });

  it('takes the tenant from the key', async () => {
    const h = harness();
    await submit(h, VALID, {}, KEY_B);
    expect(h.published[0]!.run.tenantId).toBe('tenant-b');
    expect(h.admissions[0]!.tenantId).toBe('tenant-b');
  });

  it('never takes the tenant from the body: a tenantId field is refused', async () => {
    const h = harness();
    const res = await submit(h, { ...VALID, tenantId: 'tenant-b' });
    const body = expectProblem(res, 400, 'invalid_request');
    expect(body.errors).toEqual([{ path: '/tenantId', message: 'is not a known field' }]);
    expect(h.published).toHaveLength(0);
  });

  it('defaults the class from the workflow and the deadline from the class', async () => {
    const h = harness();
    const res = await submit(h, { workflow: 'report-digest', input: {} });
    expect(res.statusCode).toBe(202);
    expect(h.published[0]!.run).toMatchObject({ class: 'batch', deadline: NOW + config.api.deadlineMs.defaultBatch });
    expect(res.json().deadline).toBe(new Date(NOW + 3_600_000).toISOString());
  });

  it('honours an explicit class', async () => {
    const h = harness();
    await submit(h, { ...VALID, class: 'batch' });
    expect(h.published[0]!.run).toMatchObject({ class: 'batch', deadline: NOW + 3_600_000 });
  });

  it('sets deadline = admittedAt + deadlineMs', async () => {
    const h = harness();
    const res = await submit(h, { ...VALID, deadlineMs: 5_000 });
    expect(h.published[0]!.run).toMatchObject({ admittedAt: NOW, deadline: NOW + 5_000 });
    expect(res.json().deadline).toBe(new Date(NOW + 5_000).toISOString());
  });

  it('continues an incoming traceparent with a new span id', async () => {
    const h = harness();
    await submit(h, VALID, { traceparent: INCOMING_TRACE });
    const tp = h.published[0]!.run.traceparent;
    expect(tp).toMatch(TRACEPARENT);
    expect(tp.split('-')[1]).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
    expect(tp.split('-')[2]).not.toBe('00f067aa0ba902b7');
    expect(tp.split('-')[3]).toBe('01');
  });

  it('starts a new trace when the incoming traceparent is invalid', async () => {
    const h = harness();
    await submit(h, VALID, { traceparent: '00-00000000000000000000000000000000-00f067aa0ba902b7-01' });
    const tp = h.published[0]!.run.traceparent;
    expect(tp).toMatch(TRACEPARENT);
    expect(tp.split('-')[1]).not.toBe('00000000000000000000000000000000');
  });

  it('serializes any JSON input as JSON text', async () => {
    const h = harness();
    const inputs: unknown[] = ['plain text', 42, null, [1, { a: 'b' }], { nested: { deep: [true, false] }, unicode: 'naïve ☕' }];
    for (const input of inputs) await submit(h, { workflow: 'support-reply', input });
    expect(h.published.map((p) => p.run.input)).toEqual(inputs.map((i) => JSON.stringify(i)));
    expect(JSON.parse(h.published[4]!.run.input)).toEqual(inputs[4]);
  });

  it('carries the Idempotency-Key header', async () => {
    const h = harness();
    await submit(h, VALID, { 'idempotency-key': 'order-123-reply-1' });
    expect(h.published[0]!.run.idempotencyKey).toBe('order-123-reply-1');
  });

  it('refuses an Idempotency-Key with spaces or over 255 characters', async () => {
    const h = harness();
    expectProblem(await submit(h, VALID, { 'idempotency-key': 'has space' }), 400, 'invalid_idempotency_key');
    expectProblem(await submit(h, VALID, { 'idempotency-key': 'k'.repeat(256) }), 400, 'invalid_idempotency_key');
    expect(h.published).toHaveLength(0);
    const ok = await submit(h, VALID, { 'idempotency-key': 'k'.repeat(255) });
    expect(ok.statusCode).toBe(202);
  });

  it('records the admission after the publish, with the same run', async () => {
    const h = harness();
    const res = await submit(h, VALID);
    const run = h.published[0]!.run;
    expect(h.admissions).toEqual([
      expect.objectContaining({
        runId: res.json().runId,
        tenantId: 'tenant-a',
        workflow: 'support-reply',
        class: 'interactive',
        admittedAt: NOW,
        deadline: run.deadline,
        message: 'queued: admitted, waiting for a processor',
      }),
    ]);
  });

  it('counts the submitted run', async () => {
    const h = harness();
    await submit(h, VALID);
    const m = await h.metrics.runsSubmitted.get();
    expect(m.values).toEqual([expect.objectContaining({ value: 1, labels: { tenant: 'tenant-a', workflow: 'support-reply', class: 'interactive' } })]);
  });

  it('answers 202 even when the admission record cannot be written', async () => {
    const h = harness({ recordAdmission: () => Promise.reject(new Error('postgres down')) });
    const res = await submit(h, VALID);
    expect(res.statusCode).toBe(202);
    expect(res.json()).toMatchObject({ status: 'queued', admission: 'admitted' });
    expect(h.published).toHaveLength(1);
    expect((await h.metrics.admissionRecordFailures.get()).values[0]!.value).toBe(1);
  });

  it('gives each run its own id', async () => {
    const h = harness();
    const ids = new Set<string>();
    for (let i = 0; i < 5; i++) ids.add((await submit(h, VALID)).json().runId);
    expect(ids.size).toBe(5);
  });
});

describe('POST /v1/runs refused', () => {
  it('malformed JSON → 400 invalid_request', async () => {
    const h = harness();
    const res = await submit(h, '{"workflow": "support-reply", "input":');
    const body = expectProblem(res, 400, 'invalid_request');
    expect(body.errors).toHaveLength(1);
    expect(body.errors![0]!.path).toBe('/');
    expect(h.published).toHaveLength(0);
  });

  it('a body that is not an object → 400', async () => {
    const h = harness();
    expectProblem(await submit(h, [VALID]), 400, 'invalid_request');
    expectProblem(await submit(h, '"text"'), 400, 'invalid_request');
  });

  it('missing workflow and input → 400 listing /workflow and /input', async () => {
    const h = harness();
    const body = expectProblem(await submit(h, {}), 400, 'invalid_request');
    expect(pathsOf(body)).toEqual(['/input', '/workflow']);
    expect(h.published).toHaveLength(0);
  });

  it('a missing input alone → 400 /input', async () => {
    const h = harness();
    const body = expectProblem(await submit(h, { workflow: 'support-reply' }), 400, 'invalid_request');
    expect(pathsOf(body)).toEqual(['/input']);
  });

  it('wrong types → 400 listing every error', async () => {
    const h = harness();
    const body = expectProblem(await submit(h, { workflow: 5, input: {}, deadlineMs: '100', class: 'urgent' }), 400, 'invalid_request');
    expect(pathsOf(body)).toEqual(['/class', '/deadlineMs', '/workflow']);
    for (const e of body.errors!) expect(e.message.length).toBeGreaterThan(0);
    expect(h.published).toHaveLength(0);
  });

  it('an unknown field → 400 naming it', async () => {
    const h = harness();
    const body = expectProblem(await submit(h, { ...VALID, priority: 'high' }), 400, 'invalid_request');
    expect(body.errors).toEqual([{ path: '/priority', message: 'is not a known field' }]);
  });

  it('an unknown workflow → 400 unknown_workflow', async () => {
    const h = harness();
    const body = expectProblem(await submit(h, { workflow: 'no-such-flow', input: {} }), 400, 'unknown_workflow');
    expect(body.detail).toContain('support-reply');
    expect(h.published).toHaveLength(0);
  });

  for (const inherited of ['constructor', '__proto__', 'toString']) {
    it(`an Object.prototype member name ("${inherited}") is an unknown workflow, not a run`, async () => {
      const h = harness();
      expectProblem(await submit(h, { workflow: inherited, input: {} }), 400, 'unknown_workflow');
      expect(h.published).toHaveLength(0);
    });
  }

  it('no key → 401 with WWW-Authenticate', async () => {
    const h = harness();
    const res = await submit(h, VALID, {}, null);
    expectProblem(res, 401, 'unauthorized');
    expect(res.headers['www-authenticate']).toBe('Bearer');
    expect(h.published).toHaveLength(0);
  });

  it('a wrong key → 401 with WWW-Authenticate', async () => {
    const h = harness();
    for (const auth of ['Bearer not-a-key', 'Basic bG9jYWwta2V5LWE=', 'local-key-a']) {
      const res = await submit(h, VALID, {}, auth);
      expectProblem(res, 401, 'unauthorized');
      expect(res.headers['www-authenticate']).toBe('Bearer');
    }
    expect(h.published).toHaveLength(0);
  });

  it('the admin key → 403 forbidden', async () => {
    const h = harness();
    expectProblem(await submit(h, VALID, {}, ADMIN), 403, 'forbidden');
    expect(h.published).toHaveLength(0);
  });

  it('a 1 MiB body (over the limit) → 413', async () => {
    const h = harness();
    const big = JSON.stringify({ workflow: 'support-reply', input: 'x'.repeat(1024 * 1024) });
    const body = expectProblem(await submit(h, big), 413, 'payload_too_large');
    expect(body.detail).toContain(String(config.api.bodyLimitBytes));
    expect(h.published).toHaveLength(0);
  });

  it('one byte over the configured limit → 413, at the limit → accepted', async () => {
    const h = harness();
    const padFor = (size: number) => {
      const skeleton = JSON.stringify({ workflow: 'support-reply', input: '' });
      return JSON.stringify({ workflow: 'support-reply', input: 'x'.repeat(size - skeleton.length) });
    };
    const limit = config.api.bodyLimitBytes;
    expect(Buffer.byteLength(padFor(limit))).toBe(limit);
    expect((await submit(h, padFor(limit))).statusCode).toBe(202);
    expectProblem(await submit(h, padFor(limit + 1)), 413, 'payload_too_large');
  });

  it('text/plain → 415', async () => {
    const h = harness();
    const res = await submit(h, JSON.stringify(VALID), { 'content-type': 'text/plain' });
    expectProblem(res, 415, 'unsupported_media_type');
    expect(h.published).toHaveLength(0);
  });

  it('other non-JSON media types → 415', async () => {
    const h = harness();
    for (const type of ['application/xml', 'application/x-www-form-urlencoded']) {
      const body = expectProblem(await submit(h, JSON.stringify(VALID), { 'content-type': type }), 415, 'unsupported_media_type');
      expect(body.title).toBe('Send application/json');
    }
    expect(h.published).toHaveLength(0);
  });

  it('application/json with a charset → accepted', async () => {
    const h = harness();
    expect((await submit(h, VALID, { 'content-type': 'application/json; charset=utf-8' })).statusCode).toBe(202);
  });

  it('deadlineMs below the minimum → 400 at /deadlineMs', async () => {
    const h = harness();
    const body = expectProblem(await submit(h, { ...VALID, deadlineMs: config.api.deadlineMs.min - 1 }), 400, 'invalid_request');
    expect(body.errors).toEqual([{ path: '/deadlineMs', message: `must be at least ${config.api.deadlineMs.min} ms` }]);
    expect(h.published).toHaveLength(0);
  });

  it('deadlineMs above the maximum or not positive → 400 at /deadlineMs', async () => {
    const h = harness();
    const over = expectProblem(await submit(h, { ...VALID, deadlineMs: config.api.deadlineMs.max + 1 }), 400, 'invalid_request');
    expect(over.errors).toEqual([{ path: '/deadlineMs', message: `must be at most ${config.api.deadlineMs.max} ms` }]);
    for (const bad of [0, -1, 1.5]) {
      const body = expectProblem(await submit(h, { ...VALID, deadlineMs: bad }), 400, 'invalid_request');
      expect(pathsOf(body)).toEqual(['/deadlineMs']);
    }
  });
});

describe('POST /v1/runs when Kafka does not acknowledge', () => {
  // [label, error, metric reason, may the event still land in Kafka?]
  const failures: Array<[string, () => Error, string, boolean]> = [
    ['a produce timeout before the message was sent', () => new ProduceTimeoutError(5_000, false), 'timeout', false],
    ['a produce timeout after the message was sent', () => new ProduceTimeoutError(5_000, true), 'timeout', true],
    ['a full produce queue', () => new ProduceQueueFullError(10_000), 'queue_full', false],
    ['any other produce error', () => new Error('broker gone'), 'error', true],
  ];

  for (const [label, makeError, reason, mayLand] of failures) {
    it(`${label} → 503 overloaded with Retry-After, and no admission record`, async () => {
      const h = harness({ publish: () => Promise.reject(makeError()) });
      const res = await submit(h, VALID);
      const body = expectProblem(res, 503, 'overloaded', true);
      expect(res.headers['retry-after']).toBe('1');
      expect(body.retryAfterSec).toBe(1);
      expect(h.admissions).toHaveLength(0);
      expect(res.headers.location).toBeUndefined();
      const failuresMetric = await h.metrics.submitFailures.get();
      expect(failuresMetric.values).toEqual([expect.objectContaining({ value: 1, labels: { reason } })]);
      expect((await h.metrics.runsSubmitted.get()).values.every((v) => v.value === 0)).toBe(true);
      // The backlog entry taken at admission is given back, and the key freed for a retry.
      expect(fakes.withdrawn).toHaveLength(1);
      // "Not accepted" holds even if the event lands later: it is marked never to run.
      expect(fakes.marked).toEqual(mayLand ? [{ runId: fakes.decided[0]!.runId, deadline: fakes.decided[0]!.deadline }] : []);
    });
  }

  it("marks the run's answer pending before the produce, and settles it with the answer", async () => {
    for (const [makeError, settled] of [
      [undefined, 'answered'],
      [() => new ProduceTimeoutError(5_000, true), 'not_acknowledged'],
    ] as const) {
      const h = harness(makeError ? { publish: () => Promise.reject(makeError()) } : {});
      expect((await submit(h, VALID)).statusCode).toBe(makeError ? 503 : 202);
      const runId = fakes.decided[0]!.runId;
      // The pending mark lives as long as an answer can take: a processor that gets the run meanwhile waits.
      expect(fakes.timeline).toEqual([`pending ${runId} ${config.kafka.produceTimeoutMs}`, `publish ${runId}`, `${settled} ${runId}`]);
      await h.app.close();
    }
  });

  it('leaves the pending mark of an event that never left the process to expire: nothing can read it', async () => {
    const h = harness({ publish: () => Promise.reject(new ProduceTimeoutError(5_000, false)) });
    expectProblem(await submit(h, VALID), 503, 'overloaded', true);
    expect(fakes.timeline.map((t) => t.split(' ')[0])).toEqual(['pending', 'publish']);
  });

  it('writes no answer mark for a submission refused at admission, nor when the outage policy decided without Redis', async () => {
    const refused = harness({ decision: { outcome: 'rejected', reason: 'overloaded', retryAfterSec: 2 } });
    expectProblem(await submit(refused, VALID), 503, 'overloaded', true);
    expect(fakes.timeline).toEqual([]);
    await refused.app.close();
    const failOpen = harness({ decision: { outcome: 'admitted', reason: 'capacity_available', redisOutage: true } });
    expect((await submit(failOpen, VALID)).statusCode).toBe(202);
    expect(fakes.timeline.map((t) => t.split(' ')[0])).toEqual(['publish']);
  });

  it('accepts the run when the pending mark cannot be written, counted, and clears no mark it did not write', async () => {
    const h = harness({ markAnswerPending: () => Promise.reject(new Error('ECONNREFUSED')) });
    expect((await submit(h, VALID)).statusCode).toBe(202);
    expect(fakes.timeline.map((t) => t.split(' ')[0])).toEqual(['publish']);
    const cleanup = await h.metrics.submitCleanupFailures.get();
    expect(cleanup.values).toEqual([expect.objectContaining({ value: 1, labels: { step: 'mark_answer_pending' } })]);
  });

  it('still answers 503 when the never-run mark cannot be written, and counts that', async () => {
    const h = harness({ publish: () => Promise.reject(new ProduceTimeoutError(5_000, true)), markNotAcknowledged: () => Promise.reject(new Error('ECONNREFUSED')) });
    expectProblem(await submit(h, VALID), 503, 'overloaded', true);
    expect(fakes.withdrawn).toHaveLength(1);
    const cleanup = await h.metrics.submitCleanupFailures.get();
    expect(cleanup.values).toEqual([expect.objectContaining({ value: 1, labels: { step: 'mark_not_acknowledged' } })]);
  });

  it('an event too large for any Kafka request → 413, entry withdrawn, nothing marked', async () => {
    const h = harness({ publish: () => Promise.reject(new MessageTooLargeError(1_200_000, 1_000_000)) });
    const body = expectProblem(await submit(h, VALID), 413, 'payload_too_large', false);
    expect(body.detail).toContain('1200000 bytes');
    expect(fakes.withdrawn).toHaveLength(1);
    expect(fakes.marked).toEqual([]);
    expect((await h.metrics.submitFailures.get()).values).toEqual([expect.objectContaining({ value: 1, labels: { reason: 'too_large' } })]);
  });

  it('frees the Idempotency-Key so the caller can retry the same request', async () => {
    const h = harness({ publish: () => Promise.reject(new ProduceTimeoutError(5_000, false)) });
    await submit(h, VALID, { 'idempotency-key': 'k-1' });
    expect(fakes.settled).toEqual([{ kind: 'forget', key: 'k-1' }]);
  });
});

describe('POST /v1/runs token reservations', () => {
  const reserving: AdmissionDecision = { outcome: 'admitted', reason: 'capacity_available', tokenReservation: 1_200 };

  it('an admitted run carries the tokens it reserved on its event', async () => {
    const h = harness({ decision: reserving });
    expect((await submit(h, VALID)).statusCode).toBe(202);
    expect(h.published[0]!.run.tokenReservation).toBe(1_200);
    expect(fakes.tokensReturned).toEqual([]);
  });

  it('a run Kafka did not take gives its reservation back with its backlog entry', async () => {
    const h = harness({ decision: reserving, publish: () => Promise.reject(new Error('broker gone')) });
    expectProblem(await submit(h, VALID), 503, 'overloaded', true);
    expect(fakes.tokensReturned).toEqual([{ runId: fakes.decided[0]!.runId, tokens: 1_200, deadline: fakes.decided[0]!.deadline }]);
  });
});

describe('POST /v1/runs admission outcomes', () => {
  it('queued: 202 with admission "queued" and the queue position', async () => {
    const h = harness({ decision: { outcome: 'queued', reason: 'waiting_for_capacity', queuePosition: 7 } });
    const res = await submit(h, VALID);
    expect(res.statusCode).toBe(202);
    expect(res.json()).toMatchObject({ admission: 'queued', queuePosition: 7, status: 'queued' });
    expect(h.admissions[0]!.message).toBe('queued: waiting for capacity, position 7 in line');
  });

  it('admitted: 202 without a queue position', async () => {
    const res = await submit(harness(), VALID);
    expect(res.json().admission).toBe('admitted');
    expect(res.json()).not.toHaveProperty('queuePosition');
  });

  const refusals: Array<[AdmissionDecision, number]> = [
    [{ outcome: 'deferred', reason: 'rate_limited', retryAfterSec: 3 }, 429],
    [{ outcome: 'deferred', reason: 'token_budget_exhausted', retryAfterSec: 12 }, 429],
    [{ outcome: 'deferred', reason: 'tenant_backlog_full', retryAfterSec: 2 }, 429],
    [{ outcome: 'rejected', reason: 'overloaded', retryAfterSec: 1 }, 503],
    [{ outcome: 'rejected', reason: 'deadline_unreachable', retryAfterSec: 40 }, 503],
    [{ outcome: 'rejected', reason: 'dependency_unavailable', retryAfterSec: 5 }, 503],
  ];
  for (const [decision, status] of refusals) {
    it(`${decision.outcome} ${decision.reason} → ${status} with Retry-After, no event, key freed`, async () => {
      const h = harness({ decision });
      const res = await submit(h, VALID, { 'idempotency-key': 'k-2' });
      const body = expectProblem(res, status, decision.reason, true);
      expect(body.retryAfterSec).toBe(decision.retryAfterSec);
      expect(res.headers['retry-after']).toBe(String(decision.retryAfterSec));
      expect(h.published).toHaveLength(0);
      expect(h.admissions).toHaveLength(0);
      expect(fakes.settled).toEqual([{ kind: 'forget', key: 'k-2' }]);
    });
  }
});

describe('POST /v1/runs with an Idempotency-Key', () => {
  it('stores the 202 answer for replay', async () => {
    const h = harness();
    const res = await submit(h, VALID, { 'idempotency-key': 'k-3' });
    expect(res.statusCode).toBe(202);
    expect(fakes.settled).toEqual([{ kind: 'store', key: 'k-3', answer: { status: 202, headers: { Location: res.headers.location }, body: res.json() } }]);
  });

  it('replays a stored answer with Idempotent-Replayed and produces nothing', async () => {
    const answer: StoredAnswer = { status: 202, headers: { Location: '/v1/runs/x' }, body: { runId: 'x', status: 'queued' } };
    const h = harness({ claim: { kind: 'replay', answer } });
    const res = await submit(h, VALID, { 'idempotency-key': 'k-4' });
    expect(res.statusCode).toBe(202);
    expect(res.headers['idempotent-replayed']).toBe('true');
    expect(res.headers.location).toBe('/v1/runs/x');
    expect(res.json()).toEqual(answer.body);
    expect(h.published).toHaveLength(0);
  });

  it('same key, different body → 409 idempotency_key_reused', async () => {
    const h = harness({ claim: { kind: 'conflict' } });
    expectProblem(await submit(h, VALID, { 'idempotency-key': 'k-5' }), 409, 'idempotency_key_reused');
    expect(h.published).toHaveLength(0);
  });

  it('first request still running past the wait → 409 idempotency_key_in_use, retryable', async () => {
    const h = harness({ claim: { kind: 'in_progress' } });
    const body = expectProblem(await submit(h, VALID, { 'idempotency-key': 'k-6' }), 409, 'idempotency_key_in_use', true);
    expect(body.retryAfterSec).toBe(1);
  });
});

/** `depth` arrays (or objects) nested in one another, as JSON text: too deep for any recursive serializer. */
const nestedArrays = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);
const nestedObjects = (depth: number) => '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);
const bodyWithInput = (inputJson: string) => `{"workflow":"support-reply","input":${inputJson}}`;

describe('POST /v1/runs input bounds, checked before anything is taken', () => {
  for (const [shape, nested] of [['arrays', nestedArrays], ['objects', nestedObjects]] as const) {
    it(`input of ${shape} nested 5,000 deep → 400 at /input; no claim, no token, no backlog entry`, async () => {
      const h = harness();
      const res = await submit(h, bodyWithInput(nested(5_000)), { 'idempotency-key': 'deep-1' });
      const body = expectProblem(res, 400, 'invalid_request');
      expect(body.errors).toEqual([{ path: '/input', message: `nests arrays and objects deeper than ${config.api.input.maxDepth} levels` }]);
      expect(fakes.fingerprints).toHaveLength(0);
      expect(fakes.decided).toHaveLength(0);
      expect(fakes.held.size).toBe(0);
      expect(h.published).toHaveLength(0);
    });
  }

  it('nesting at api.input.maxDepth is accepted, one level more is refused', async () => {
    const h = harness();
    const max = config.api.input.maxDepth;
    expect((await submit(h, bodyWithInput(nestedArrays(max)))).statusCode).toBe(202);
    expect(h.published[0]!.run.input).toBe(nestedArrays(max));
    expect(pathsOf(expectProblem(await submit(h, bodyWithInput(nestedArrays(max + 1))), 400, 'invalid_request'))).toEqual(['/input']);
  });

  it('an input at api.input.maxBytes as JSON is accepted, one byte more is refused', async () => {
    const h = harness({ config: { ...config, api: { ...config.api, input: { maxDepth: 64, maxBytes: 1_024 } } } });
    const ofBytes = (n: number) => JSON.stringify('x'.repeat(n - 2));
    expect((await submit(h, bodyWithInput(ofBytes(1_024)))).statusCode).toBe(202);
    const body = expectProblem(await submit(h, bodyWithInput(ofBytes(1_025))), 400, 'invalid_request');
    expect(body.errors).toEqual([{ path: '/input', message: 'is 1025 bytes as JSON; the limit is 1024' }]);
    expect(fakes.decided).toHaveLength(1);
  });

  it('an input that grows past the bound when re-encoded (invalid UTF-8 → U+FFFD) → 400, though the body fit', async () => {
    const h = harness();
    const raw = Buffer.concat([Buffer.from('{"workflow":"support-reply","input":"'), Buffer.alloc(100_000, 0xff), Buffer.from('"}')]);
    expect(raw.length).toBeLessThan(config.api.bodyLimitBytes);
    const res = await h.app.inject({ method: 'POST', url: '/v1/runs', headers: { 'content-type': 'application/json', authorization: KEY_A }, payload: raw });
    const body = expectProblem(res, 400, 'invalid_request');
    expect(body.errors).toEqual([{ path: '/input', message: `is ${300_002} bytes as JSON; the limit is ${config.api.input.maxBytes}` }]);
    expect(fakes.decided).toHaveLength(0);
  });

  it('a bad deadline and a bad input are reported together', async () => {
    const h = harness();
    const body = expectProblem(await submit(h, `{"workflow":"support-reply","deadlineMs":1,"input":${nestedArrays(100)}}`), 400, 'invalid_request');
    expect(pathsOf(body)).toEqual(['/deadlineMs', '/input']);
  });

  it('serializes the input once, canonically: the event and the Idempotency-Key fingerprint use the same text', async () => {
    const h = harness();
    const body = { workflow: 'support-reply', class: 'batch', input: { z: [{ b: 1, a: 2 }], a: 'first' } };
    await submit(h, body, { 'idempotency-key': 'canon-1' });
    expect(h.published[0]!.run.input).toBe('{"a":"first","z":[{"a":2,"b":1}]}');
    // The fingerprint is what it always was: the hash of the canonical request.
    expect(fakes.fingerprints).toEqual([createHash('sha256').update(canonicalJson({ workflow: body.workflow, body })).digest('hex')]);
  });
});

describe('POST /v1/runs gives back what it took, whatever fails after admission', () => {
  const timeout = () => Promise.reject(new ProduceTimeoutError(5_000, false));

  async function expectNothingHeld(res: LightMyRequestResponse, status: number, code: string) {
    expectProblem(res, status, code, true);
    expect(fakes.held.size).toBe(0);
    expect(fakes.openClaims.size).toBe(0);
  }

  it('admission takes the slot and then throws (a bug) → 500 problem+json, entry withdrawn, key freed', async () => {
    const h = harness({
      decide: async (_req, take) => {
        take();
        throw new TypeError('boom after the backlog script');
      },
    });
    const res = await submit(h, VALID, { 'idempotency-key': 'bug-1' });
    await expectNothingHeld(res, 500, 'internal');
    expect(fakes.settled).toEqual([{ kind: 'forget', key: 'bug-1' }]);
  });

  it('Kafka does not acknowledge a queued run → 503, entry withdrawn, key freed', async () => {
    const h = harness({ decision: { outcome: 'queued', reason: 'waiting_for_capacity', queuePosition: 3 }, publish: timeout });
    await expectNothingHeld(await submit(h, VALID, { 'idempotency-key': 'q-1' }), 503, 'overloaded');
  });

  it('the producer throws synchronously → 503, entry withdrawn, key freed', async () => {
    const h = harness({
      publish: () => {
        throw new TypeError('encoder blew up');
      },
    });
    await expectNothingHeld(await submit(h, VALID, { 'idempotency-key': 's-1' }), 503, 'overloaded');
  });

  it('the withdrawal itself fails → still the 503 (never a 500), the key still freed, the failure counted', async () => {
    const h = harness({ publish: timeout, withdraw: () => Promise.reject(new Error('Connection is closed.')) });
    const res = await submit(h, VALID, { 'idempotency-key': 'w-1' });
    expectProblem(res, 503, 'overloaded', true);
    expect(fakes.openClaims.size).toBe(0);
    expect((await h.metrics.submitCleanupFailures.get()).values).toEqual([expect.objectContaining({ value: 1, labels: { step: 'withdraw' } })]);
  });

  it('freeing the key fails after a refusal → the refusal is still answered, the failure counted', async () => {
    const h = harness({ decision: { outcome: 'deferred', reason: 'rate_limited', retryAfterSec: 3 }, forget: () => Promise.reject(new Error('Command timed out')) });
    expectProblem(await submit(h, VALID, { 'idempotency-key': 'f-1' }), 429, 'rate_limited', true);
    expect(fakes.withdrawn).toEqual([]);
    expect((await h.metrics.submitCleanupFailures.get()).values).toEqual([expect.objectContaining({ value: 1, labels: { step: 'forget' } })]);
  });

  it('storing the answer fails after Kafka acknowledged → still 202, the run keeps its entry', async () => {
    const h = harness({ store: () => Promise.reject(new Error('Connection is closed.')) });
    const res = await submit(h, VALID, { 'idempotency-key': 'st-1' });
    expect(res.statusCode).toBe(202);
    expect([...fakes.held]).toEqual([res.json().runId]);
    expect(fakes.withdrawn).toEqual([]);
    expect((await h.metrics.submitCleanupFailures.get()).values).toEqual([expect.objectContaining({ value: 1, labels: { step: 'store' } })]);
  });

  it('a run admitted by the Redis outage fallback is not withdrawn when Kafka fails: nothing was recorded', async () => {
    const h = harness({ decision: { outcome: 'admitted', reason: 'capacity_available', redisOutage: true }, publish: timeout });
    expectProblem(await submit(h, VALID), 503, 'overloaded', true);
    expect(fakes.withdrawn).toEqual([]);
  });

  it('counts Kafka not acknowledging as an outage decision', async () => {
    const h = harness({ publish: timeout });
    await submit(h, VALID);
    expect((await h.metrics.admissionOutageDecisions.get()).values).toEqual([expect.objectContaining({ value: 1, labels: { dependency: 'kafka', policy: 'fail-closed', outcome: 'refused' } })]);
  });
});

describe('POST /v1/runs while Redis is unreachable', () => {
  it('the Idempotency-Key claim fails → the outage policy answers: 503 overloaded with Retry-After', async () => {
    const h = harness({ claim: () => Promise.reject(Object.assign(new Error('Reached the max retries per request limit (which is 1).'), { name: 'MaxRetriesPerRequestError' })) });
    const res = await submit(h, VALID, { 'idempotency-key': 'o-1' });
    const body = expectProblem(res, 503, 'overloaded', true);
    expect(res.headers['retry-after']).toBe('2');
    expect(body.retryAfterSec).toBe(2);
    expect(fakes.outages).toEqual([{ tenantId: 'tenant-a', runClass: 'interactive', idempotencyKey: true, now: NOW }]);
    expect(fakes.decided).toHaveLength(0);
  });

  it('the claim fails with a bug, not an outage → 500 internal problem+json, nothing taken', async () => {
    const h = harness({ claim: () => Promise.reject(new TypeError('undefined is not a function')) });
    const res = await submit(h, VALID, { 'idempotency-key': 'o-2' });
    expectProblem(res, 500, 'internal', true);
    expect(fakes.outages).toHaveLength(0);
    expect(fakes.decided).toHaveLength(0);
  });

  it('an outage refusal from admission → 503 with its Retry-After and no withdrawal attempt', async () => {
    const h = harness({ decision: { outcome: 'rejected', reason: 'overloaded', retryAfterSec: 2, redisOutage: true } });
    const res = await submit(h, VALID);
    expectProblem(res, 503, 'overloaded', true);
    expect(res.headers['retry-after']).toBe('2');
    expect(fakes.withdrawn).toEqual([]);
  });
});

describe('POST /v1/runs while Postgres is slow or down', () => {
  it('the admission row is waited for at most api.recordAdmissionTimeoutMs; the 202 does not wait longer', async () => {
    const h = harness({ config: { ...config, api: { ...config.api, recordAdmissionTimeoutMs: 50 } }, recordAdmission: () => new Promise(() => undefined) });
    const res = await submit(h, VALID);
    expect(res.statusCode).toBe(202);
    expect(h.published).toHaveLength(1);
    expect((await h.metrics.admissionRecordFailures.get()).values[0]!.value).toBe(1);
    expect((await h.metrics.admissionOutageDecisions.get()).values).toEqual([expect.objectContaining({ value: 1, labels: { dependency: 'postgres', policy: 'fail-open', outcome: 'admitted' } })]);
  });
});

describe('the error handler tells outages from bugs', () => {
  const id = '019b7a00-0000-7000-8000-000000000001';
  const read = (h: Harness) => h.app.inject({ method: 'GET', url: `/v1/runs/${id}`, headers: { authorization: KEY_A } });

  it('an infrastructure failure escaping a route → 503 dependency_unavailable with Retry-After', async () => {
    const h = harness({ readTake: () => Promise.reject(Object.assign(new Error('terminating connection due to administrator command'), { severity: 'FATAL', code: '57P01' })) });
    const res = await read(h);
    const body = expectProblem(res, 503, 'dependency_unavailable', true);
    expect(res.headers['retry-after']).toBe('2');
    expect(body.retryAfterSec).toBe(2);
  });

  it('anything else is a bug → 500 internal, still problem+json', async () => {
    const h = harness({ readTake: () => Promise.reject(new TypeError('cannot read properties of undefined')) });
    const body = expectProblem(await read(h), 500, 'internal', true);
    expect(body.detail).toBe('see the server log for this requestId');
  });
});

describe('GET /v1/runs/:id', () => {
  const view = (runId: string): RunView => ({
    runId,
    workflow: 'support-reply',
    class: 'interactive',
    status: 'running',
    statusMessage: 'calling anthropic',
    admittedAt: new Date(NOW).toISOString(),
    deadline: new Date(NOW + 30_000).toISOString(),
    startedAt: new Date(NOW + 10).toISOString(),
    attempts: 1,
  });

  it('returns the own tenant’s run with links', async () => {
    const h = harness();
    const runId = (await submit(h, VALID)).json().runId as string;
    h.views.set(runId, { tenantId: 'tenant-a', view: view(runId) });
    const res = await h.app.inject({ method: 'GET', url: `/v1/runs/${runId}`, headers: { authorization: KEY_A } });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ ...view(runId), links: { self: `/v1/runs/${runId}`, events: `/v1/runs/${runId}/events` } });
    expect(h.getRunCalls).toEqual([{ runId, tenantId: 'tenant-a' }]);
  });

  it('another tenant’s run → 404', async () => {
    const h = harness();
    const runId = (await submit(h, VALID)).json().runId as string;
    h.views.set(runId, { tenantId: 'tenant-a', view: view(runId) });
    const res = await h.app.inject({ method: 'GET', url: `/v1/runs/${runId}`, headers: { authorization: KEY_B } });
    expectProblem(res, 404, 'not_found');
    expect(h.getRunCalls).toEqual([{ runId, tenantId: 'tenant-b' }]);
  });

  it('a malformed id → 404 without a lookup', async () => {
    const h = harness();
    for (const id of ['nope', '123', '019B7A00-0000-7000-8000-000000000001']) {
      expectProblem(await h.app.inject({ method: 'GET', url: `/v1/runs/${id}`, headers: { authorization: KEY_A } }), 404, 'not_found');
    }
    expect(h.getRunCalls).toHaveLength(0);
  });

  it('needs a tenant key', async () => {
    const h = harness();
    const id = '019b7a00-0000-7000-8000-000000000001';
    const anon = await h.app.inject({ method: 'GET', url: `/v1/runs/${id}` });
    expectProblem(anon, 401, 'unauthorized');
    expectProblem(await h.app.inject({ method: 'GET', url: `/v1/runs/${id}`, headers: { authorization: ADMIN } }), 403, 'forbidden');
    expect(h.getRunCalls).toHaveLength(0);
  });
});

describe('other routes and request ids', () => {
  it('an unknown route → 404 problem', async () => {
    const h = harness();
    const res = await h.app.inject({ method: 'GET', url: '/v1/nothing-here?x=1', headers: { authorization: KEY_A } });
    const body = expectProblem(res, 404, 'not_found');
    expect(body.detail).toBe('no route GET /v1/nothing-here');
    expect(body.instance).toBe('/v1/nothing-here?x=1');
  });

  it('echoes X-Request-Id and uses it as requestId', async () => {
    const h = harness();
    const res = await submit(h, {}, { 'x-request-id': 'client-req.42:a_b-c' });
    expect(res.headers['x-request-id']).toBe('client-req.42:a_b-c');
    expect(expectProblem(res, 400, 'invalid_request').requestId).toBe('client-req.42:a_b-c');

    const ok = await submit(h, VALID, { 'x-request-id': 'client-req-43' });
    expect(ok.statusCode).toBe(202);
    expect(ok.headers['x-request-id']).toBe('client-req-43');

    const unauth = await submit(h, VALID, { 'x-request-id': 'client-req-44' }, null);
    expect(expectProblem(unauth, 401, 'unauthorized').requestId).toBe('client-req-44');
  });

  it('replaces an unusable X-Request-Id with a generated one', async () => {
    const h = harness();
    for (const given of ['has spaces in it', 'x'.repeat(129), 'semi;colon']) {
      const res = await submit(h, {}, { 'x-request-id': given });
      const id = res.headers['x-request-id'];
      expect(id).not.toBe(given);
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(expectProblem(res, 400, 'invalid_request').requestId).toBe(id);
    }
  });

  it('generates a request id when none is given', async () => {
    const h = harness();
    const a = await submit(h, VALID);
    const b = await submit(h, VALID);
    expect(a.headers['x-request-id']).toBeTruthy();
    expect(a.headers['x-request-id']).not.toBe(b.headers['x-request-id']);
  });

  it('serves /healthz without a key', async () => {
    const h = harness();
    const res = await h.app.inject({ method: 'GET', url: '/healthz' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ status: 'ok' });
  });

  it('counts answered requests by route, status and outcome', async () => {
    const h = harness();
    await submit(h, VALID);
    await submit(h, {}, {}, null);
    const values = (await h.metrics.httpRequests.get()).values;
    expect(values).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ value: 1, labels: { route: '/v1/runs', method: 'POST', status: '202', outcome: 'admitted' } }),
        expect.objectContaining({ value: 1, labels: { route: '/v1/runs', method: 'POST', status: '401', outcome: 'error' } }),
      ]),
    );
  });
});

describe('HTTP metrics by outcome: fast refusals do not flatter the latency of accepted runs', () => {
  /** The outcome label of the one request answered so far, in the counter and the duration histogram alike. */
  async function outcomeOf(h: Harness): Promise<{ status: string; outcome: string }> {
    const counted = (await h.metrics.httpRequests.get()).values;
    expect(counted).toHaveLength(1);
    const timed = (await h.metrics.httpDuration.get()).values.filter((v) => v.metricName === 'sluice_http_request_duration_seconds_count');
    expect(timed.map((v) => [v.labels, v.value])).toEqual([[{ route: counted[0]!.labels.route, method: counted[0]!.labels.method, outcome: counted[0]!.labels.outcome }, 1]]);
    return { status: String(counted[0]!.labels.status), outcome: String(counted[0]!.labels.outcome) };
  }

  it.each([
    [{ outcome: 'admitted', reason: 'capacity_available' }, '202', 'admitted'],
    [{ outcome: 'queued', reason: 'waiting_for_capacity', queuePosition: 4 }, '202', 'queued'],
    [{ outcome: 'deferred', reason: 'rate_limited', retryAfterSec: 3 }, '429', 'deferred'],
    [{ outcome: 'deferred', reason: 'tenant_backlog_full', retryAfterSec: 2 }, '429', 'deferred'],
    [{ outcome: 'rejected', reason: 'overloaded', retryAfterSec: 1 }, '503', 'rejected'],
    [{ outcome: 'rejected', reason: 'deadline_unreachable', retryAfterSec: 9 }, '503', 'rejected'],
    [{ outcome: 'rejected', reason: 'dependency_unavailable', retryAfterSec: 5 }, '503', 'rejected'],
  ] as const)('a submission decided %j is labelled %s / %s', async (decision, status, outcome) => {
    const h = harness({ decision });
    await submit(h, VALID);
    expect(await outcomeOf(h)).toEqual({ status, outcome });
  });

  it('a submission Kafka did not acknowledge is rejected (503 overloaded)', async () => {
    const h = harness({ publish: () => Promise.reject(new ProduceTimeoutError(5_000, false)) });
    await submit(h, VALID);
    expect(await outcomeOf(h)).toEqual({ status: '503', outcome: 'rejected' });
  });

  it('a submission refused by the Redis outage policy is labelled by its decision', async () => {
    const h = harness({ claim: () => Promise.reject(Object.assign(new Error('Connection is closed.'), { name: 'MaxRetriesPerRequestError' })) });
    await submit(h, VALID, { 'idempotency-key': 'k-outage' });
    expect(fakes.outages).toHaveLength(1);
    expect(await outcomeOf(h)).toEqual({ status: '503', outcome: 'rejected' });
  });

  it.each([
    ['an invalid body', { workflow: 'support-reply' }, {}, KEY_A, '400'],
    ['an unknown workflow', { workflow: 'nope', input: {} }, {}, KEY_A, '400'],
    ['no key', VALID, {}, null, '401'],
    ['the admin key', VALID, {}, ADMIN, '403'],
    ['a malformed Idempotency-Key', VALID, { 'idempotency-key': 'has space' }, KEY_A, '400'],
  ] as const)('a submission answered before any decision (%s) is an error', async (_what, body, headers, auth, status) => {
    const h = harness();
    await submit(h, body, headers, auth);
    expect(await outcomeOf(h)).toEqual({ status, outcome: 'error' });
  });

  it('an Idempotency-Key conflict, a run too large for Kafka and a bug are errors too', async () => {
    for (const [opts, status] of [
      [{ claim: { kind: 'conflict' } }, '409'],
      [{ publish: () => Promise.reject(new MessageTooLargeError(2_000_000, 1_000_000)) }, '413'],
      [{ decide: () => Promise.reject(new TypeError('a bug')) }, '500'],
    ] as const) {
      const h = harness(opts as HarnessOptions);
      await submit(h, VALID, { 'idempotency-key': 'k-5' });
      expect(await outcomeOf(h)).toEqual({ status, outcome: 'error' });
      await h.app.close();
    }
  });

  it('a replayed answer is other: read back, not decided', async () => {
    const h = harness({ claim: { kind: 'replay', answer: { status: 202, headers: {}, body: { runId: 'x', status: 'queued', admission: 'admitted' } } } });
    await submit(h, VALID, { 'idempotency-key': 'k-6' });
    expect(await outcomeOf(h)).toEqual({ status: '202', outcome: 'other' });
  });

  it('reads, health and unknown routes are other, whatever their status', async () => {
    for (const req of [
      { method: 'GET', url: '/v1/runs/0190f5a2-7c00-7abc-8def-0123456789ab', headers: { authorization: KEY_A } },
      { method: 'GET', url: '/healthz' },
      { method: 'GET', url: '/v1/nothing-here', headers: { authorization: KEY_A } },
    ] as const) {
      const h = harness();
      await h.app.inject(req);
      expect((await outcomeOf(h)).outcome).toBe('other');
      await h.app.close();
    }
  });
});
