import http, { type IncomingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { backlogAfterSettling } from '../../support/backlog.js';
import { expectDrillInvariants, resetSimStats, settleAndWeigh } from '../../support/drill-invariants.js';
import { DrillLog } from '../../support/drill-load.js';
import { startDrillStack, type DrillStack } from '../../support/drill-stack.js';
import { MAX_HEADER_BYTES, RUN_PLACEHOLDER, TENANT_KEYS, fuzzRequest, type FuzzRequest } from './api-requests.js';

const REQUESTS = 10_000;
const CONCURRENCY = 16;
/** Sending all of them must fit in this, or the fuzz fails: a stuck API is a finding too. */
const SEND_BOUND_MS = 150_000;
const REQUEST_TIMEOUT_MS = 10_000;
const MAX_BODY_KEPT = 4_096;
/** The contract's statuses (README): 2xx, its 4xx, and 503 problem+json with Retry-After. */
const DOCUMENTED = new Set([200, 202, 204, 400, 401, 403, 404, 405, 409, 413, 415, 429, 431, 503]);

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
function offContract(req: FuzzRequest, path: string, a: Answer): string | undefined {
  const type = String(a.headers['content-type'] ?? '');
  if (a.status === 0) return `no answer: ${a.error}`;
  // Node's HTTP parser refuses an oversized header section before any route runs (Sluice still
  // answers it as problem+json, below).
  if (a.status === 431 && headerBytes(req) <= MAX_HEADER_BYTES - 1_024) return '431 for a header section under the limit';
  const readiness = path === '/readyz' || path.startsWith('/readyz?');
  if (!DOCUMENTED.has(a.status)) return `undocumented status ${a.status}`;
  if (a.status < 400 || req.method === 'HEAD') return undefined;
  if (readiness && a.status === 503) return undefined;
  if (!type.includes('application/problem+json')) return `${a.status} without problem+json (${type || 'no content-type'}${frameworkCode(a)})`;
  if (a.status === 503 && a.headers['retry-after'] === undefined) return '503 without Retry-After';
  return undefined;
}

/**
 * 10,000 generated requests against a running API (all roles in one process), 16 at a time.
 * Only the contract's answers may come back, the process must be alive at the end, every run
 * the fuzz got admitted must end, and then the admission backlog must be back to zero: no
 * request, however malformed, may leak capacity. The seed is printed; SLUICE_FUZZ_SEED replays it.
 */
describe('API fuzz', () => {
  let stack: DrillStack;

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

    const api = new URL(stack.api);
    const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
    // The log follows the admitted runs only; the fuzz's own answers are judged here, below.
    const log = new DrillLog(stack.api);
    const statusCounts = new Map<number, number>();
    const admitted: string[] = [];
    const broken: { why: string; request: string }[] = [];
    const started = Date.now();
    let next = 0;
    let sent = 0;
    let refusedByNode = 0;
    const worker = async () => {
      while (next < requests.length && Date.now() - started < SEND_BOUND_MS) {
        const i = next++;
        const req = requests[i]!;
        const runId = admitted.length > 0 ? admitted[i % admitted.length]! : '00000000-0000-7000-8000-000000000000';
        const path = req.path.replaceAll(RUN_PLACEHOLDER, runId);
        const a = await send(api, agent, req, path);
        if (a.status === -1) {
          refusedByNode++;
          continue;
        }
        sent++;
        statusCounts.set(a.status, (statusCounts.get(a.status) ?? 0) + 1);
        const why = offContract(req, path, a);
        if (why) broken.push({ why, request: describeRequest(i, req, path) });
        const newRun = req.method === 'POST' && a.status === 202 ? jsonField(a.body, 'runId') : undefined;
        if (newRun !== undefined && !log.accepted.has(newRun)) {
          // Node keeps the first of repeated Authorization headers; the run is that key's tenant's.
          const auth = [req.headers.authorization ?? ''].flat()[0]!;
          const [tenant, key] = Object.entries(TENANT_KEYS).find(([, k]) => auth.includes(k)) ?? ['?', ''];
          log.accepted.set(newRun, { runId: newRun, tenant, key, workflow: jsonField(req.body!, 'workflow') ?? '?' });
          admitted.push(newRun);
        }
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    agent.destroy();
    const elapsedMs = Date.now() - started;
    const statuses = [...statusCounts].sort(([a], [b]) => a - b).map(([s, n]) => `${s}=${n}`).join(' ');
    console.log(`FUZZ api: seed=${seed} sent=${sent} refusedByNode=${refusedByNode} in ${(elapsedMs / 1000).toFixed(1)} s; statuses ${statuses}; admitted=${admitted.length}; off-contract=${broken.length}`);

    expect(sent + refusedByNode, `every generated request sent within ${SEND_BOUND_MS / 1000} s (seed ${seed})`).toBe(REQUESTS);
    // One example per kind of breach, with how often it happened.
    const kinds = new Map<string, { count: number; example: string }>();
    for (const b of broken) {
      const kind = kinds.get(b.why) ?? { count: 0, example: b.request };
      kind.count++;
      kinds.set(b.why, kind);
    }
    expect.soft(Object.fromEntries(kinds), `only the contract's answers (seed ${seed})`).toEqual({});
    const health = await fetch(`${stack.api}/healthz`).then((r) => r.status, (err: unknown) => String(err));
    expect.soft(health, 'the API still answers /healthz').toBe(200);

    const verdict = await settleAndWeigh({ name: 'api-fuzz', submitted: sent, log, sim: stack.sim, config: stack.config, terminalWithinMs: 60_000, processes: [stack.front] });
    expectDrillInvariants(verdict);
    const backlog = await backlogAfterSettling(inject('infra').redisUrl, stack.namespace, Object.keys(TENANT_KEYS));
    expect.soft(backlog, `the admission backlog returns to zero (seed ${seed})`).toEqual(Object.fromEntries(Object.keys(backlog).map((k) => [k, 0])));
  }, 300_000);
});
