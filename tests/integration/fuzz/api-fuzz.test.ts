import http, { type IncomingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { backlogAfterSettling } from '../../support/backlog.js';
import { expectDrillInvariants, resetSimStats, settleAndWeigh } from '../../support/drill-invariants.js';
import { DrillLog } from '../../support/drill-load.js';
import { startDrillStack, type DrillStack } from '../../support/drill-stack.js';
import { ADMIN_KEY } from '../harness.js';
import { MAX_HEADER_BYTES, RUN_PLACEHOLDER, TENANT_KEYS, fuzzRequest, type FuzzRequest } from './api-requests.js';
import { CSRF_PLACEHOLDER, ORIGIN_PLACEHOLDER, SESSION_PLACEHOLDER, operatorRequest } from './console-requests.js';

const REQUESTS = 10_000;
const OPERATOR_REQUESTS = 10_000;
const CONCURRENCY = 16;
/** Sending all of them must fit in this, or the fuzz fails: a stuck API is a finding too. */
const SEND_BOUND_MS = 150_000;
/** The operator routes read Redis and Postgres only (no run is admitted), so they get less. */
const OPERATOR_SEND_BOUND_MS = 100_000;
const REQUEST_TIMEOUT_MS = 10_000;
const MAX_BODY_KEPT = 4_096;
/** The contract's statuses (README): 2xx, its 4xx, and 503 problem+json with Retry-After. */
const DOCUMENTED = new Set([200, 202, 204, 400, 401, 403, 404, 405, 409, 413, 415, 429, 431, 503]);
/** The operator routes with Kafka, Redis and Postgres all up: 2xx and 4xx only, never a 5xx. */
const OPERATOR_DOCUMENTED = new Set([...DOCUMENTED].filter((s) => s < 500));

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  error?: string;
}

/** Sockets that have carried a request: another request on one of them is on a reused connection. */
const usedSockets = new WeakSet<Socket>();

/** One raw request, exactly as generated: node:http sends paths and header bytes unnormalised. */
function sendOnce(api: URL, agent: http.Agent | false, req: FuzzRequest, path: string): Promise<Answer & { reusedSocket: boolean }> {
  return new Promise((resolve) => {
    let request: http.ClientRequest;
    try {
      // Node frames a GET or DELETE body with neither Content-Length nor chunking: say its length.
      const headers = req.body === undefined ? req.headers : { ...req.headers, 'content-length': String(req.body.length) };
      request = http.request({ host: api.hostname, port: api.port, method: req.method, path, headers, agent });
    } catch (err) {
      // Node refused to send it (a header it will not put on the wire): not a request at all.
      resolve({ status: -1, headers: {}, body: Buffer.alloc(0), error: String(err), reusedSocket: false });
      return;
    }
    let settled = false;
    let reusedSocket = false;
    let response: http.IncomingMessage | undefined;
    const chunks: Buffer[] = [];
    let size = 0;
    const answered = (): Answer => ({ status: response?.statusCode ?? 0, headers: response?.headers ?? {}, body: Buffer.concat(chunks) });
    const done = (a: Answer) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ ...a, reusedSocket });
    };
    // An event stream may outlast the timeout: once its status line is in, that is the answer.
    const timer = setTimeout(() => {
      done(response ? answered() : { status: 0, headers: {}, body: Buffer.alloc(0), error: `no answer within ${REQUEST_TIMEOUT_MS} ms` });
      request.destroy();
    }, REQUEST_TIMEOUT_MS);
    request.on('error', (err: Error & { rawPacket?: Buffer }) => {
      if (response) return done(answered());
      // Node's parser refused the request and answered with a body even to a HEAD, which the
      // client cannot parse: the status line in the raw bytes is still the server's answer.
      const raw = err.rawPacket?.toString('latin1') ?? '';
      const line = /^HTTP\/1\.[01] (\d{3})/.exec(raw);
      if (line) return done({ status: Number(line[1]), headers: { 'content-type': /content-type: ([^\r]*)/i.exec(raw)?.[1] ?? '' }, body: Buffer.alloc(0) });
      done({ status: 0, headers: {}, body: Buffer.alloc(0), error: err.message });
    });
    request.on('socket', (socket) => {
      reusedSocket = usedSockets.has(socket);
      usedSockets.add(socket);
    });
    request.on('response', (res) => {
      response = res;
      res.on('data', (c: Buffer) => {
        if (size < MAX_BODY_KEPT) chunks.push(c);
        size += c.length;
      });
      res.on('end', () => done(answered()));
      res.on('error', () => done(answered()));
      res.on('close', () => done(answered()));
    });
    request.end(req.body);
  });
}

/**
 * A kept-alive socket that the server closed after its previous answer fails the next request
 * before it is read; as Node's documentation advises, that one is sent again on a new connection.
 */
async function send(api: URL, agent: http.Agent, req: FuzzRequest, path: string): Promise<Answer> {
  const first = await sendOnce(api, agent, req, path);
  return first.status === 0 && first.reusedSocket ? sendOnce(api, false, req, path) : first;
}

const headerBytes = (req: FuzzRequest) => Object.entries(req.headers).reduce((n, [k, v]) => n + [v].flat().reduce((m, x) => m + k.length + x.length + 4, 0), req.path.length + 64);

/** Bytes outside printable ASCII as \xNN, so what was sent can be read off a failure. */
const visible = (text: string) => text.replace(/[^\x20-\x7e]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);

const describeRequest = (i: number, req: FuzzRequest, path: string) =>
  `#${i} ${req.method} ${visible(path.slice(0, 120))} headers=${visible(JSON.stringify(req.headers).slice(0, 240))} body=${req.body ? `${req.body.length} B ${visible(req.body.subarray(0, 80).toString('latin1'))}` : 'none'}`;

function jsonField(bytes: Buffer, field: string): string | undefined {
  try {
    const value = (JSON.parse(bytes.toString('utf8')) as Record<string, unknown>)[field];
    return typeof value === 'string' ? value : undefined;
  } catch {
    return undefined;
  }
}

/** The code of a framework error body (`FST_ERR_…`), which tells one kind of breach from another. */
function frameworkCode(a: Answer): string {
  const code = /"code":"(FST_[A-Z_]+)"/.exec(a.body.toString('utf8'))?.[1];
  return code ? `, ${code}` : '';
}

/** Why an answer is outside the contract, or undefined if it is inside. */
function offContract(req: FuzzRequest, path: string, a: Answer, documented: ReadonlySet<number>): string | undefined {
  const type = String(a.headers['content-type'] ?? '');
  if (a.status === 0) return `no answer: ${a.error}`;
  // Node's HTTP parser refuses an oversized header section before any route runs (Sluice still
  // answers it as problem+json, below).
  if (a.status === 431 && headerBytes(req) <= MAX_HEADER_BYTES - 1_024) return '431 for a header section under the limit';
  const readiness = path === '/readyz' || path.startsWith('/readyz?');
  if (!documented.has(a.status)) return `undocumented status ${a.status}`;
  if (a.status < 400 || req.method === 'HEAD') return undefined;
  if (readiness && a.status === 503) return undefined;
  if (!type.includes('application/problem+json')) return `${a.status} without problem+json (${type || 'no content-type'}${frameworkCode(a)})`;
  if (a.status === 503 && a.headers['retry-after'] === undefined) return '503 without Retry-After';
  return undefined;
}

interface FuzzOutcome {
  sent: number;
  refusedByNode: number;
  statuses: string;
  elapsedMs: number;
  /** One example per kind of breach of the contract, with how often it happened. */
  breaches: Record<string, { count: number; example: string }>;
}

/**
 * Sends `requests` 16 at a time until all are sent or `boundMs` passed. `prepare` turns a request
 * into what is sent (placeholders filled in); `after` sees each answer (the tenant fuzz collects
 * its admitted runs, the operator fuzz keeps its session).
 */
async function fuzz(apiUrl: string, requests: FuzzRequest[], o: { boundMs: number; documented: ReadonlySet<number>; prepare: (i: number, req: FuzzRequest) => FuzzRequest; after?: (req: FuzzRequest, a: Answer) => Promise<void> }): Promise<FuzzOutcome> {
  const api = new URL(apiUrl);
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const statusCounts = new Map<number, number>();
  const broken: { why: string; request: string }[] = [];
  const started = Date.now();
  let next = 0;
  let sent = 0;
  let refusedByNode = 0;
  const worker = async () => {
    while (next < requests.length && Date.now() - started < o.boundMs) {
      const i = next++;
      const req = o.prepare(i, requests[i]!);
      const a = await send(api, agent, req, req.path);
      if (a.status === -1) {
        refusedByNode++;
        continue;
      }
      sent++;
      statusCounts.set(a.status, (statusCounts.get(a.status) ?? 0) + 1);
      const why = offContract(req, req.path, a, o.documented);
      if (why) broken.push({ why, request: describeRequest(i, req, req.path) });
      await o.after?.(req, a);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  agent.destroy();
  const breaches: FuzzOutcome['breaches'] = {};
  for (const b of broken) {
    const kind = (breaches[b.why] ??= { count: 0, example: b.request });
    kind.count++;
  }
  const statuses = [...statusCounts].sort(([a], [b]) => a - b).map(([s, n]) => `${s}=${n}`).join(' ');
  return { sent, refusedByNode, statuses, elapsedMs: Date.now() - started, breaches };
}

/** Fills every occurrence of each placeholder in the path and the header values. */
function filled(req: FuzzRequest, values: Record<string, string>): FuzzRequest {
  const fill = (text: string) => Object.entries(values).reduce((t, [k, v]) => t.replaceAll(k, v), text);
  return { ...req, path: fill(req.path), headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, Array.isArray(v) ? v.map(fill) : fill(v)])) };
}

/**
 * 10,000 generated requests against a running API (all roles in one process), 16 at a time.
 * Only the contract's answers may come back, the process must be alive at the end, every run
 * the fuzz got admitted must end, and then the admission backlog must be back to zero: no
 * request, however malformed, may leak capacity. The seed is printed; SLUICE_FUZZ_SEED replays it.
 */
describe('API fuzz', () => {
  let stack: DrillStack;
  /** Runs the tenant fuzz got admitted, which the operator fuzz then looks up and cancels. */
  const admitted: string[] = [];

  beforeAll(async () => {
    // A quarter of the requests carry a key that matches none, all from 127.0.0.1: the throttle
    // that would soon answer every request 429 is opened wide, so the fuzz reaches the routes.
    stack = await startDrillStack({ label: 'fuzz-api', overrides: { api: { authFailureLimit: { attempts: 1_000, perSec: 1 } } } });
  });

  afterAll(async () => {
    await stack?.stop();
  });

  it(`answers ${REQUESTS} generated requests by the contract and leaks no capacity`, async () => {
    const seed = Number(process.env.SLUICE_FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
    console.log(`FUZZ api: seed=${seed} (SLUICE_FUZZ_SEED=${seed} replays these requests)`);
    const requests = fc.sample(fuzzRequest, { seed, numRuns: REQUESTS });
    await resetSimStats(stack.sim);

    // The log follows the admitted runs only; the fuzz's own answers are judged by `fuzz`.
    const log = new DrillLog(stack.api);
    const outcome = await fuzz(stack.api, requests, {
      boundMs: SEND_BOUND_MS,
      documented: DOCUMENTED,
      prepare: (i, req) => filled(req, { [RUN_PLACEHOLDER]: admitted.length > 0 ? admitted[i % admitted.length]! : '00000000-0000-7000-8000-000000000000' }),
      after: async (req, a) => {
        const newRun = req.method === 'POST' && a.status === 202 ? jsonField(a.body, 'runId') : undefined;
        if (newRun === undefined || log.accepted.has(newRun)) return;
        // Node keeps the first of repeated Authorization headers; the run is that key's tenant's.
        const auth = [req.headers.authorization ?? ''].flat()[0]!;
        const [tenant, key] = Object.entries(TENANT_KEYS).find(([, k]) => auth.includes(k)) ?? ['?', ''];
        log.accepted.set(newRun, { runId: newRun, tenant, key, workflow: jsonField(req.body!, 'workflow') ?? '?' });
        admitted.push(newRun);
      },
    });
    const { sent, refusedByNode } = outcome;
    console.log(`FUZZ api: seed=${seed} sent=${sent} refusedByNode=${refusedByNode} in ${(outcome.elapsedMs / 1000).toFixed(1)} s; statuses ${outcome.statuses}; admitted=${admitted.length}; off-contract=${Object.values(outcome.breaches).reduce((n, b) => n + b.count, 0)}`);

    expect(sent + refusedByNode, `every generated request sent within ${SEND_BOUND_MS / 1000} s (seed ${seed})`).toBe(REQUESTS);
    expect.soft(outcome.breaches, `only the contract's answers (seed ${seed})`).toEqual({});
    const health = await fetch(`${stack.api}/healthz`).then((r) => r.status, (err: unknown) => String(err));
    expect.soft(health, 'the API still answers /healthz').toBe(200);

    const verdict = await settleAndWeigh({ name: 'api-fuzz', submitted: sent, log, sim: stack.sim, config: stack.config, terminalWithinMs: 60_000, processes: [stack.front] });
    expectDrillInvariants(verdict);
    const backlog = await backlogAfterSettling(inject('infra').redisUrl, stack.namespace, Object.keys(TENANT_KEYS));
    expect.soft(backlog, `the admission backlog returns to zero (seed ${seed})`).toEqual(Object.fromEntries(Object.keys(backlog).map((k) => [k, 0])));
  }, 300_000);

  /**
   * The console's routes with a live session (kept live: a login from the fuzz's browser or a
   * logout ends it, and the fuzz logs in again) and the admin API's with the admin key, each with
   * its credentials, CSRF token and Origin also wrong or missing. Every answer is 2xx or a
   * documented 4xx as problem+json; with every dependency up, a 5xx is a bug.
   */
  it(`answers ${OPERATOR_REQUESTS} generated console and admin requests with 2xx or 4xx by the contract, never a 5xx`, async () => {
    const seed = Number(process.env.SLUICE_FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
    console.log(`FUZZ operator: seed=${seed} (SLUICE_FUZZ_SEED=${seed} replays these requests)`);
    const requests = fc.sample(operatorRequest, { seed, numRuns: OPERATOR_REQUESTS });
    let session = await consoleLogin(stack.api);
    let renewing: Promise<void> | undefined;
    const renew = () =>
      (renewing ??= consoleLogin(stack.api)
        .then((s) => void (session = s))
        .finally(() => (renewing = undefined)));
    const outcome = await fuzz(stack.api, requests, {
      boundMs: OPERATOR_SEND_BOUND_MS,
      documented: OPERATOR_DOCUMENTED,
      prepare: (i, req) => filled(req, { [SESSION_PLACEHOLDER]: session.cookie, [CSRF_PLACEHOLDER]: session.csrf, [ORIGIN_PLACEHOLDER]: stack.api, [RUN_PLACEHOLDER]: admitted[i % Math.max(1, admitted.length)] ?? '00000000-0000-7000-8000-000000000000' }),
      after: async (req, a) => {
        const ended = req.path === '/console/session' && ((req.method === 'POST' && a.status === 200) || (req.method === 'DELETE' && a.status === 204));
        if (ended) await renew();
      },
    });
    const { sent, refusedByNode } = outcome;
    console.log(`FUZZ operator: seed=${seed} sent=${sent} refusedByNode=${refusedByNode} in ${(outcome.elapsedMs / 1000).toFixed(1)} s; statuses ${outcome.statuses}; off-contract=${Object.values(outcome.breaches).reduce((n, b) => n + b.count, 0)}`);

    expect(sent + refusedByNode, `every generated request sent within ${OPERATOR_SEND_BOUND_MS / 1000} s (seed ${seed})`).toBe(OPERATOR_REQUESTS);
    expect.soft(outcome.breaches, `only 2xx and the contract's 4xx (seed ${seed})`).toEqual({});
    expect.soft(stack.front.logs.filter((l) => l.msg === 'unhandled error' || l.msg === 'router error'), 'no request reached the error handler as a bug').toEqual([]);
    const health = await fetch(`${stack.api}/healthz`).then((r) => r.status, (err: unknown) => String(err));
    expect.soft(health, 'the API still answers /healthz').toBe(200);
  }, 180_000);
});

/** A console session as the page gets one: its cookie and its CSRF token. */
async function consoleLogin(apiUrl: string): Promise<{ cookie: string; csrf: string }> {
  const res = await fetch(`${apiUrl}/console/session`, { method: 'POST', headers: { 'content-type': 'application/json', origin: apiUrl }, body: JSON.stringify({ key: ADMIN_KEY }), signal: AbortSignal.timeout(10_000) });
  if (res.status !== 200) throw new Error(`the console login answered ${res.status}: ${await res.text()}`);
  return { cookie: res.headers.getSetCookie()[0]!.split(';')[0]!, csrf: ((await res.json()) as { csrfToken: string }).csrfToken };
}
