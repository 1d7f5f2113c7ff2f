import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import type { FastifyInstance } from 'fastify';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { sha256Hex } from '../../../src/util/sha256-hex.js';
import type { CallTimeouts } from '../../../src/config/schema.js';
import { loadConfig } from '../../../src/config/load.js';
import { createLogger } from '../../../src/obs/logger.js';
import { callLlm, type LlmRequest } from '../../../src/steps/llm-call.js';
import { StepError } from '../../../src/steps/step-error.js';
import { createProviderSim, type ProviderSimStats } from '../../../src/dev/sim/provider-sim.js';

const ADMIN = { authorization: 'Bearer admin' };
const SYSTEM = 'Be brief.';
const USER = 'hello sluice';
const baseDependency = loadConfig({ env: {} }).dependencies.anthropic;
if (baseDependency?.kind !== 'llm') throw new Error('the local config must define the anthropic LLM dependency');
const LLM_DEPENDENCY = baseDependency;

/**
 * Budgets that are either far below or far above what the server does, so a slow CI machine
 * cannot flip an outcome: every margin here is at least several hundred milliseconds.
 */
const GENEROUS: CallTimeouts = { connectMs: 5_000, readMs: 5_000, totalMs: 10_000 };

/** A client with the SDK's default retries left on: only callLlm's own `maxRetries: 0` keeps a call to one request. */
function clientFor(baseURL: string): Anthropic {
  return new Anthropic({ apiKey: 'test', baseURL });
}

function request(timeouts: Partial<CallTimeouts> = {}, headers: Record<string, string> = {}): LlmRequest {
  const t = { ...GENEROUS, ...timeouts };
  return {
    dependency: 'anthropic',
    config: { ...LLM_DEPENDENCY, model: 'claude-sim-1', timeouts: t },
    system: SYSTEM,
    userContent: USER,
    tenantId: 'tenant-a',
    timeoutMs: t.totalMs,
    headers,
  };
}

async function failure(promise: Promise<unknown>): Promise<StepError> {
  const error = await promise.then(
    () => undefined,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(StepError);
  return error as StepError;
}

describe('callLlm against the provider simulator', () => {
  let sim: FastifyInstance;
  let client: Anthropic;

  const setFault = async (body: Record<string, unknown>): Promise<void> => {
    expect((await sim.inject({ method: 'PUT', url: '/admin/faults', headers: ADMIN, payload: body })).statusCode).toBe(200);
  };
  const stats = async (): Promise<ProviderSimStats> => (await sim.inject({ method: 'GET', url: '/admin/stats', headers: ADMIN })).json();
  const callsMade = async (): Promise<number> => (await stats()).calls.anthropic ?? 0;
  // The sim leaves a call when its connection closes, so this shows our abort really hung up.
  const expectNothingInFlight = () => vi.waitFor(async () => expect((await stats()).concurrent).toEqual({ anthropic: 0 }), { timeout: 2_000, interval: 20 });

  beforeAll(async () => {
    sim = createProviderSim({ adminKeySha256: sha256Hex('admin'), logger: createLogger('silent'), tools: [], random: () => 0 });
    await sim.listen({ host: '127.0.0.1', port: 0 });
    client = clientFor(`http://127.0.0.1:${(sim.server.address() as AddressInfo).port}`);
  });

  afterAll(async () => {
    await sim.close();
  });

  beforeEach(async () => {
    await sim.inject({ method: 'DELETE', url: '/admin/faults', headers: ADMIN });
    await sim.inject({ method: 'POST', url: '/admin/stats/reset', headers: ADMIN });
  });

  it('accumulates the streamed text, model, stop reason and usage', async () => {
    const result = await callLlm(client, request());
    const reply = `Simulated reply to: ${USER}`;
    expect(result).toEqual({
      text: reply,
      model: 'claude-sim-1',
      stopReason: 'end_turn',
      usage: { inputTokens: Math.ceil(`${SYSTEM}\n${USER}`.length / 4), outputTokens: Math.ceil(reply.length / 4), cacheReadTokens: 0, cacheCreationTokens: 0 },
      headers: expect.any(Function),
    });
    expect(await callsMade()).toBe(1);
  });

  it('lets a slow stream finish: the read budget is idle time, not the whole answer', async () => {
    // 1.5 s spread over five deltas: 300 ms gaps under a 1 s idle budget the whole answer exceeds.
    await setFault({ target: 'anthropic', latencyMs: 1_500 });
    const result = await callLlm(client, request({ readMs: 1_000 }));
    expect(result.text).toBe(`Simulated reply to: ${USER}`);
  });

  it('reports a trickle that outlasts the total budget as total_timeout and hangs up', async () => {
    // 600 ms gaps keep well inside the 1.5 s idle budget; the 3 s answer overruns the 1.2 s total.
    await setFault({ target: 'anthropic', latencyMs: 3_000 });
    const started = Date.now();
    const error = await failure(callLlm(client, request({ readMs: 1_500, totalMs: 1_200 })));
    expect(error).toMatchObject({ kind: 'total_timeout', retryable: true });
    expect(Date.now() - started).toBeLessThan(2_800);
    expect(await callsMade()).toBe(1);
    await expectNothingInFlight();
  });

  it('reports a provider that never sends headers as connect_timeout', async () => {
    await setFault({ target: 'anthropic', hang: true });
    const started = Date.now();
    const error = await failure(callLlm(client, request({ connectMs: 150 })));
    expect(error).toMatchObject({ kind: 'connect_timeout', retryable: true });
    expect(Date.now() - started).toBeLessThan(4_000);
    expect(await callsMade()).toBe(1);
    await expectNothingInFlight();
  });

  it('passes a 429 on with its retry-after, in one request', async () => {
    // The SDK would wait out these 3 s and retry if its own retries were on.
    await setFault({ target: 'anthropic', errorStatus: 429, retryAfterSec: 3 });
    const error = await failure(callLlm(client, request()));
    expect(error).toMatchObject({ kind: 'http_status', status: 429, retryAfterSec: 3, retryable: true });
    expect(await callsMade()).toBe(1);
  });

  it("passes a rate-limit refusal on as retryable with the provider's retry-after, in one request", async () => {
    await setFault({ target: 'anthropic', rateLimit: { requestsPerMinute: 1 } });
    await callLlm(client, request());
    const error = await failure(callLlm(client, request()));
    expect(error).toMatchObject({ kind: 'http_status', status: 429, retryable: true });
    // A minute to refill the one request, less the moments since the first call.
    expect(error.retryAfterSec).toBeGreaterThanOrEqual(58);
    expect(error.retryAfterSec).toBeLessThanOrEqual(60);
    expect(await callsMade()).toBe(2);
    expect((await stats()).rateLimited).toEqual({ anthropic: 1 });
  });

  it('passes a 529 on as retryable, in one request', async () => {
    await setFault({ target: 'anthropic', errorStatus: 529 });
    const error = await failure(callLlm(client, request()));
    expect(error).toMatchObject({ kind: 'http_status', status: 529, retryable: true });
    expect(await callsMade()).toBe(1);
  });

  it('lets the SDK retry on its own only when sdkMaxRetries asks for it, waiting out retry-after inside the call', async () => {
    await setFault({ target: 'anthropic', errorStatus: 429, retryAfterSec: 0 });
    const req = request();
    const error = await failure(callLlm(client, { ...req, config: { ...req.config, sdkMaxRetries: 2 } }));
    expect(error).toMatchObject({ kind: 'http_status', status: 429 });
    expect(await callsMade()).toBe(3);
  });
});

interface Scripted {
  client: Anthropic;
  requests(): number;
  /** Resolves when the server sees the client's connection for the latest request close. */
  hungUp(): Promise<void>;
}

type Script = (req: IncomingMessage, res: ServerResponse) => void;

function sse(res: ServerResponse, type: string, fields: Record<string, unknown> = {}): void {
  res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...fields })}\n\n`);
}

function startStream(res: ServerResponse, usage: Record<string, unknown> = { input_tokens: 7, output_tokens: 1 }): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  sse(res, 'message_start', {
    message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-scripted', content: [], stop_reason: null, stop_sequence: null, usage },
  });
}

function textDelta(res: ServerResponse, text: string): void {
  sse(res, 'content_block_delta', { index: 0, delta: { type: 'text_delta', text } });
}

function finishStream(res: ServerResponse, outputTokens: number, usage: Record<string, unknown> = {}): void {
  sse(res, 'message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: outputTokens, ...usage } });
  sse(res, 'message_stop');
  res.end();
}

describe('callLlm against a scripted SSE server', () => {
  let server: Server;
  let script: Script;
  let count = 0;
  let lastClose: Promise<void> = Promise.resolve();
  let scripted: Scripted;

  beforeAll(async () => {
    server = createServer((req, res) => {
      count++;
      lastClose = new Promise((resolve) => res.once('close', () => resolve()));
      req.resume();
      req.once('end', () => script(req, res));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    scripted = {
      client: clientFor(`http://127.0.0.1:${(server.address() as AddressInfo).port}`),
      requests: () => count,
      hungUp: () => lastClose,
    };
  });

  afterEach(() => {
    count = 0;
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it('reports a stream that stalls mid-answer as read_timeout and hangs up', async () => {
    script = (_req, res) => {
      startStream(res);
      textDelta(res, 'Hel');
      // Then nothing, ever: only the idle budget can end this.
    };
    const started = Date.now();
    const error = await failure(callLlm(scripted.client, request({ readMs: 150 })));
    expect(error).toMatchObject({ kind: 'read_timeout', retryable: true });
    expect(Date.now() - started).toBeLessThan(4_000);
    await scripted.hungUp();
    expect(scripted.requests()).toBe(1);
  });

  it('counts pings as stream activity', async () => {
    script = (_req, res) => {
      startStream(res);
      const pings = setInterval(() => sse(res, 'ping'), 100);
      res.once('close', () => clearInterval(pings));
      setTimeout(() => {
        clearInterval(pings);
        textDelta(res, 'pong');
        finishStream(res, 1);
      }, 1_500);
    };
    const result = await callLlm(scripted.client, request({ readMs: 500 }));
    expect(result).toEqual({ text: 'pong', model: 'claude-scripted', stopReason: 'end_turn', usage: { inputTokens: 7, outputTokens: 1, cacheReadTokens: 0, cacheCreationTokens: 0 }, headers: expect.any(Function) });
  });

  it('returns empty text for an answer without text blocks', async () => {
    script = (_req, res) => {
      startStream(res);
      finishStream(res, 0);
    };
    expect(await callLlm(scripted.client, request())).toEqual({ text: '', model: 'claude-scripted', stopReason: 'end_turn', usage: { inputTokens: 7, outputTokens: 0, cacheReadTokens: 0, cacheCreationTokens: 0 }, headers: expect.any(Function) });
  });

  it('reads the cache counts of message_start, and the final message_delta\'s cumulative counts over them', async () => {
    script = (_req, res) => {
      startStream(res, { input_tokens: 7, output_tokens: 1, cache_read_input_tokens: 2048, cache_creation_input_tokens: 300 });
      textDelta(res, 'cached');
      // The API may repeat the input counts in the last delta, cumulative; null means "not reported".
      finishStream(res, 12, { input_tokens: 9, cache_read_input_tokens: 2050, cache_creation_input_tokens: null });
    };
    const result = await callLlm(scripted.client, request());
    expect(result.usage).toEqual({ inputTokens: 9, outputTokens: 12, cacheReadTokens: 2050, cacheCreationTokens: 300 });
  });

  it('takes a count that is not a non-negative integer as not reported: counters never go down', async () => {
    script = (_req, res) => {
      startStream(res, { input_tokens: -5, output_tokens: 1, cache_read_input_tokens: 1.5, cache_creation_input_tokens: '40' });
      finishStream(res, 3, { input_tokens: 2 ** 60, cache_read_input_tokens: 'many' });
    };
    const result = await callLlm(scripted.client, request());
    expect(result.usage).toEqual({ inputTokens: 0, outputTokens: 3, cacheReadTokens: 0, cacheCreationTokens: 0 });
  });

  it.each([
    ['overloaded_error', 529],
    ['rate_limit_error', 429],
    ['api_error', 500],
  ])('maps an %s event inside a 200 stream to a retryable HTTP %i', async (type, status) => {
    script = (_req, res) => {
      startStream(res);
      textDelta(res, 'partial');
      sse(res, 'error', { error: { type, message: 'try later' } });
      res.end();
    };
    const error = await failure(callLlm(scripted.client, request()));
    expect(error).toMatchObject({ kind: 'http_status', status, retryable: true });
    expect(error.message).toContain(type);
    expect(scripted.requests()).toBe(1);
  });

  it('treats a stream cut off before message_stop as a retryable connection failure', async () => {
    script = (_req, res) => {
      startStream(res);
      textDelta(res, 'half an ans');
      res.end();
    };
    const error = await failure(callLlm(scripted.client, request()));
    expect(error).toMatchObject({ kind: 'connection', retryable: true });
  });

  it('exposes the headers of a successful response', async () => {
    script = (_req, res) => {
      res.setHeader('anthropic-ratelimit-requests-limit', '50');
      startStream(res);
      finishStream(res, 1);
    };
    const result = await callLlm(scripted.client, request());
    expect(result.headers?.('Anthropic-Ratelimit-Requests-Limit')).toBe('50');
  });

  it('exposes the headers of a failed response, and reads a 429’s retry-after as an HTTP date too', async () => {
    const retryAt = new Date(Math.ceil(Date.now() / 1000) * 1000 + 5_000).toUTCString();
    script = (_req, res) => {
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after': retryAt, 'anthropic-ratelimit-requests-remaining': '0' });
      res.end(JSON.stringify({ type: 'error', error: { type: 'rate_limit_error', message: 'slow down' } }));
    };
    const error = await failure(callLlm(scripted.client, request()));
    expect(error).toMatchObject({ kind: 'http_status', status: 429, retryable: true });
    expect(error.retryAfterSec).toBeGreaterThan(3);
    expect(error.retryAfterSec).toBeLessThanOrEqual(6);
    expect(error.responseHeaders?.('anthropic-ratelimit-requests-remaining')).toBe('0');
  });

  it('does not retry a 400', async () => {
    script = (_req, res) => {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', message: 'max_tokens: too large' } }));
    };
    const error = await failure(callLlm(scripted.client, request()));
    expect(error).toMatchObject({ kind: 'http_status', status: 400, retryable: false });
    expect(scripted.requests()).toBe(1);
  });

  it('lets the total budget win when it is shorter than the connect budget', async () => {
    script = () => {
      // No headers: the 300 ms left before the run's deadline run out before the 5 s connect budget.
    };
    const error = await failure(callLlm(scripted.client, { ...request(), timeoutMs: 300 }));
    expect(error).toMatchObject({ kind: 'total_timeout', retryable: true });
    await scripted.hungUp();
    expect(scripted.requests()).toBe(1);
  });
});
