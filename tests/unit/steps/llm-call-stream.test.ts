import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import type { FastifyInstance } from 'fastify';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { sha256Hex } from '../../../src/util/sha256-hex.js';
import type { CallTimeouts } from '../../../src/config/schema.js';
import { loadConfig } from '../../../src/config/load.js';
import { createLogger } from '../../../src/obs/logger.js';
import { ANSWER_SLACK_BYTES, callLlm, MAX_BYTES_PER_TOKEN, MAX_CONTENT_BLOCKS, MAX_TOOL_INPUT_BYTES, maxAnswerBytes, maxEventBytes, SseEventMeter, type LlmRequest } from '../../../src/steps/llm-call.js';
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
    messages: [{ role: 'user', content: USER }],
    tenantId: 'tenant-a',
    timeoutMs: t.totalMs,
    headers,
  };
}

function withMaxTokens(req: LlmRequest, maxTokens: number): LlmRequest {
  return { ...req, config: { ...req.config, maxTokens } };
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
      content: [{ type: 'text', text: reply }],
      model: 'claude-sim-1',
      stopReason: 'end_turn',
      usage: { inputTokens: Math.ceil(`${SYSTEM}\n${USER}`.length / 4), outputTokens: Math.ceil(reply.length / 4), cacheReadTokens: 0, cacheCreationTokens: 0 },
      answerBytes: reply.length,
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
  /** The latest request's body, parsed. */
  body(): Record<string, unknown>;
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

function blockStart(res: ServerResponse, index: number, contentBlock: Record<string, unknown>): void {
  sse(res, 'content_block_start', { index, content_block: contentBlock });
}

function blockDelta(res: ServerResponse, index: number, delta: Record<string, unknown>): void {
  sse(res, 'content_block_delta', { index, delta });
}

function blockStop(res: ServerResponse, index: number): void {
  sse(res, 'content_block_stop', { index });
}

function textBlock(res: ServerResponse, text: string, index = 0): void {
  blockStart(res, index, { type: 'text', text: '' });
  blockDelta(res, index, { type: 'text_delta', text });
  blockStop(res, index);
}

/** A tool_use block whose input arrives as the given pieces of JSON, one input_json_delta each. */
function toolUseBlock(res: ServerResponse, index: number, id: string, name: string, pieces: string[]): void {
  blockStart(res, index, { type: 'tool_use', id, name, input: {} });
  for (const partial_json of pieces) blockDelta(res, index, { type: 'input_json_delta', partial_json });
  blockStop(res, index);
}

function finishStream(res: ServerResponse, outputTokens: number, usage: Record<string, unknown> = {}, stopReason = 'end_turn'): void {
  sse(res, 'message_delta', { delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: outputTokens, ...usage } });
  sse(res, 'message_stop');
  res.end();
}

describe('callLlm against a scripted SSE server', () => {
  let server: Server;
  let script: Script;
  let count = 0;
  let lastClose: Promise<void> = Promise.resolve();
  let lastBody = '';
  let scripted: Scripted;

  beforeAll(async () => {
    server = createServer((req, res) => {
      count++;
      lastClose = new Promise((resolve) => res.once('close', () => resolve()));
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.once('end', () => {
        lastBody = Buffer.concat(chunks).toString('utf8');
        script(req, res);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    scripted = {
      client: clientFor(`http://127.0.0.1:${(server.address() as AddressInfo).port}`),
      requests: () => count,
      body: () => JSON.parse(lastBody) as Record<string, unknown>,
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
      blockStart(res, 0, { type: 'text', text: '' });
      blockDelta(res, 0, { type: 'text_delta', text: 'Hel' });
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
        textBlock(res, 'pong');
        finishStream(res, 1);
      }, 1_500);
    };
    const result = await callLlm(scripted.client, request({ readMs: 500 }));
    expect(result).toEqual({ text: 'pong', content: [{ type: 'text', text: 'pong' }], model: 'claude-scripted', stopReason: 'end_turn', usage: { inputTokens: 7, outputTokens: 1, cacheReadTokens: 0, cacheCreationTokens: 0 }, answerBytes: 4, headers: expect.any(Function) });
  });

  it('returns empty text for an answer without text blocks', async () => {
    script = (_req, res) => {
      startStream(res);
      finishStream(res, 0);
    };
    expect(await callLlm(scripted.client, request())).toEqual({ text: '', content: [], model: 'claude-scripted', stopReason: 'end_turn', usage: { inputTokens: 7, outputTokens: 0, cacheReadTokens: 0, cacheCreationTokens: 0 }, answerBytes: 0, headers: expect.any(Function) });
  });

  it('reads the cache counts of message_start, and the final message_delta\'s cumulative counts over them', async () => {
    script = (_req, res) => {
      startStream(res, { input_tokens: 7, output_tokens: 1, cache_read_input_tokens: 2048, cache_creation_input_tokens: 300 });
      textBlock(res, 'cached');
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
      textBlock(res, 'partial');
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
      textBlock(res, 'half an ans');
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

  it('sends the given messages, and the tools with their schema as input_schema', async () => {
    script = (_req, res) => {
      startStream(res);
      finishStream(res, 1);
    };
    const messages: LlmRequest['messages'] = [
      { role: 'user', content: 'where is order 42?' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'order_lookup', input: { order_id: '42' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '{"status":"shipped"}' }] },
    ];
    const inputSchema = { type: 'object', properties: { order_id: { type: 'string' } }, required: ['order_id'] };
    await callLlm(scripted.client, { ...request(), messages, tools: [{ name: 'order_lookup', description: 'Finds an order.', inputSchema }] });
    expect(scripted.body()).toMatchObject({ system: SYSTEM, messages, tools: [{ name: 'order_lookup', description: 'Finds an order.', input_schema: inputSchema }] });
  });

  it('sends no tools field when there are no tools', async () => {
    script = (_req, res) => {
      startStream(res);
      finishStream(res, 1);
    };
    await callLlm(scripted.client, { ...request(), tools: [] });
    expect(scripted.body()).not.toHaveProperty('tools');
    expect(scripted.body()).toMatchObject({ messages: [{ role: 'user', content: USER }] });
  });

  it('assembles a tool_use input streamed in pieces', async () => {
    script = (_req, res) => {
      startStream(res);
      toolUseBlock(res, 0, 'toolu_1', 'order_lookup', ['', '{"ord', 'er_id": "4', '2", "items": [1, ', '2]}']);
      finishStream(res, 9, {}, 'tool_use');
    };
    const result = await callLlm(scripted.client, request());
    expect(result).toMatchObject({ text: '', stopReason: 'tool_use', content: [{ type: 'tool_use', id: 'toolu_1', name: 'order_lookup', input: { order_id: '42', items: [1, 2] } }] });
    expect(result.content[0]).not.toHaveProperty('inputError');
  });

  it('keeps text and parallel tool_use blocks in index order, whatever order their deltas come in, and skips thinking', async () => {
    script = (_req, res) => {
      startStream(res);
      blockStart(res, 0, { type: 'thinking', thinking: '', signature: '' });
      blockDelta(res, 0, { type: 'thinking_delta', thinking: 'two lookups' });
      blockDelta(res, 0, { type: 'signature_delta', signature: 'sig' });
      blockStop(res, 0);
      textBlock(res, 'Looking both up. ', 1);
      blockStart(res, 2, { type: 'tool_use', id: 'toolu_a', name: 'order_lookup', input: {} });
      blockStart(res, 3, { type: 'tool_use', id: 'toolu_b', name: 'customer_lookup', input: {} });
      blockDelta(res, 3, { type: 'input_json_delta', partial_json: '{"customer' });
      blockDelta(res, 2, { type: 'input_json_delta', partial_json: '{"order_id"' });
      blockDelta(res, 2, { type: 'input_json_delta', partial_json: ': "42"}' });
      blockDelta(res, 3, { type: 'input_json_delta', partial_json: '_id": "c7"}' });
      blockStop(res, 3);
      blockStop(res, 2);
      textBlock(res, 'One moment.', 4);
      finishStream(res, 30, {}, 'tool_use');
    };
    const result = await callLlm(scripted.client, request());
    expect(result.content).toEqual([
      { type: 'text', text: 'Looking both up. ' },
      { type: 'tool_use', id: 'toolu_a', name: 'order_lookup', input: { order_id: '42' } },
      { type: 'tool_use', id: 'toolu_b', name: 'customer_lookup', input: { customer_id: 'c7' } },
      { type: 'text', text: 'One moment.' },
    ]);
    expect(result.text).toBe('Looking both up. One moment.');
  });

  it('takes a tool_use without input deltas as the empty object', async () => {
    script = (_req, res) => {
      startStream(res);
      toolUseBlock(res, 0, 'toolu_1', 'now', []);
      finishStream(res, 3, {}, 'tool_use');
    };
    expect((await callLlm(scripted.client, request())).content).toEqual([{ type: 'tool_use', id: 'toolu_1', name: 'now', input: {} }]);
  });

  it.each([
    ['not JSON', ['{"order_id": "4', '2"'], 'not JSON'],
    ['an array', ['[1]'], 'not an object'],
    ['null', ['null'], 'not an object'],
    ['a string', ['"42"'], 'not an object'],
  ])('answers a tool_use whose input is %s with inputError, not an error: the model is told', async (_what, pieces, reason) => {
    script = (_req, res) => {
      startStream(res);
      toolUseBlock(res, 0, 'toolu_bad', 'order_lookup', pieces);
      toolUseBlock(res, 1, 'toolu_ok', 'order_lookup', ['{"order_id": "43"}']);
      finishStream(res, 9, {}, 'tool_use');
    };
    const result = await callLlm(scripted.client, request());
    expect(result.content).toEqual([
      { type: 'tool_use', id: 'toolu_bad', name: 'order_lookup', input: undefined, inputError: expect.stringContaining(reason) },
      { type: 'tool_use', id: 'toolu_ok', name: 'order_lookup', input: { order_id: '43' } },
    ]);
  });

  it(`holds at most ${MAX_CONTENT_BLOCKS} content blocks`, async () => {
    let blocks = MAX_CONTENT_BLOCKS;
    script = (_req, res) => {
      startStream(res);
      for (let i = 0; i < blocks; i++) textBlock(res, 'x', i);
      finishStream(res, blocks);
    };
    expect((await callLlm(scripted.client, request())).content).toHaveLength(MAX_CONTENT_BLOCKS);
    blocks = MAX_CONTENT_BLOCKS + 1;
    const error = await failure(callLlm(scripted.client, request()));
    expect(error).toMatchObject({ kind: 'bad_response', retryable: false });
    expect(error.message).toContain(`more than ${MAX_CONTENT_BLOCKS} content blocks`);
  });

  it(`holds at most ${MAX_TOOL_INPUT_BYTES} bytes of tool input in a response, over all its blocks`, async () => {
    /** A JSON object of exactly `bytes` bytes, in 16 KiB pieces. */
    const input = (bytes: number): string[] => `{"a":"${'x'.repeat(bytes - 8)}"}`.match(/[^]{1,16384}/g)!;
    let secondBytes = MAX_TOOL_INPUT_BYTES / 2;
    script = (_req, res) => {
      startStream(res);
      toolUseBlock(res, 0, 'toolu_1', 'store', input(MAX_TOOL_INPUT_BYTES / 2));
      toolUseBlock(res, 1, 'toolu_2', 'store', input(secondBytes));
      finishStream(res, 1, {}, 'tool_use');
    };
    // A maxTokens whose answer bound is above the tool input's, so this bound is the one met.
    const large = withMaxTokens(request(), 64_000);
    const whole = await callLlm(scripted.client, large);
    expect(whole.content.map((b) => b.type === 'tool_use' && b.inputError)).toEqual([undefined, undefined]);
    secondBytes += 1;
    const error = await failure(callLlm(scripted.client, large));
    expect(error).toMatchObject({ kind: 'bad_response', retryable: false });
    expect(error.message).toContain(`more than ${MAX_TOOL_INPUT_BYTES} bytes of tool input`);
  });

  describe('the answer\'s bound, from maxTokens', () => {
    const MAX_TOKENS = 8;
    const BOUND = maxAnswerBytes(MAX_TOKENS);
    /** Writes `text_delta`s of 1,000 bytes (the last shorter) until `bytes` are sent, then keeps sending them until the client hangs up. */
    const endless = (res: ServerResponse, sent: { bytes: number }) => {
      const timer = setInterval(() => {
        blockDelta(res, 0, { type: 'text_delta', text: 'y'.repeat(1_000) });
        sent.bytes += 1_000;
      }, 5);
      res.once('close', () => clearInterval(timer));
    };

    it(`is maxTokens × ${MAX_BYTES_PER_TOKEN} + ${ANSWER_SLACK_BYTES} bytes of text and tool input`, () => {
      expect(BOUND).toBe(8 * 16 + 16_384);
      expect(maxAnswerBytes(64_000)).toBe(1_040_384);
      expect(maxEventBytes(MAX_TOKENS)).toBe(6 * BOUND + 4_096);
    });

    it('takes an answer of exactly the bound, counting UTF-8 bytes, and reports them', async () => {
      // "é" is two bytes: half the bound in characters is the whole bound in bytes.
      const text = 'é'.repeat(BOUND / 2);
      script = (_req, res) => {
        startStream(res);
        textBlock(res, text);
        finishStream(res, 8);
      };
      const result = await callLlm(scripted.client, withMaxTokens(request(), MAX_TOKENS));
      expect(result.text).toBe(text);
      expect(result.answerBytes).toBe(BOUND);
    });

    it('fails an answer past it, not retryable, naming the bound and the bytes received, and hangs up', async () => {
      const sent = { bytes: 0 };
      script = (_req, res) => {
        startStream(res);
        blockStart(res, 0, { type: 'text', text: '' });
        blockDelta(res, 0, { type: 'text_delta', text: 'x'.repeat(BOUND) });
        blockDelta(res, 0, { type: 'text_delta', text: 'x' });
        endless(res, sent);
      };
      const error = await failure(callLlm(scripted.client, withMaxTokens(request(), MAX_TOKENS)));
      expect(error).toMatchObject({ kind: 'bad_response', retryable: false });
      expect(error.message).toBe(`anthropic: the answer passed its bound of ${BOUND} bytes (maxTokens 8 × 16 + 16384) with ${BOUND + 1} bytes received`);
      // Nothing more is read: the request is aborted, and the provider stops long before it would end.
      await scripted.hungUp();
      expect(sent.bytes).toBeLessThan(1_000_000);
    });

    it('counts tool input toward it with the text', async () => {
      script = (_req, res) => {
        startStream(res);
        textBlock(res, 'x'.repeat(BOUND - 10));
        toolUseBlock(res, 1, 'toolu_1', 'store', ['{"a":"123456"}']);
        finishStream(res, 8, {}, 'tool_use');
      };
      const error = await failure(callLlm(scripted.client, withMaxTokens(request(), MAX_TOKENS)));
      expect(error.message).toContain(`with ${BOUND + 4} bytes received`);
    });

    it('cuts off one event that passes its own bound before the SDK has buffered it, and hangs up', async () => {
      const sent = { bytes: 0 };
      script = (_req, res) => {
        startStream(res);
        blockStart(res, 0, { type: 'text', text: '' });
        // An event that never ends: its line grows by 16 KiB every few milliseconds.
        res.write('event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"');
        const timer = setInterval(() => {
          res.write('z'.repeat(16_384));
          sent.bytes += 16_384;
        }, 2);
        res.once('close', () => clearInterval(timer));
      };
      const error = await failure(callLlm(scripted.client, withMaxTokens(request(), MAX_TOKENS)));
      expect(error).toMatchObject({ kind: 'bad_response', retryable: false });
      expect(error.message).toMatch(new RegExp(`^anthropic: a stream event passed its bound of ${maxEventBytes(MAX_TOKENS)} bytes \\(from maxTokens 8\\) with \\d+ bytes received$`));
      await scripted.hungUp();
      expect(sent.bytes).toBeLessThan(4 * maxEventBytes(MAX_TOKENS));
    });
  });

  it.each<[string, (res: ServerResponse) => void, string]>([
    ['a delta for a block never started', (res) => blockDelta(res, 0, { type: 'text_delta', text: 'hi' }), 'never started'],
    ['a stop for a block never started', (res) => blockStop(res, 2), 'never started'],
    ['a block started twice', (res) => (textBlock(res, 'a'), textBlock(res, 'b')), 'started twice'],
    ['tool input for a text block', (res) => (blockStart(res, 0, { type: 'text', text: '' }), blockDelta(res, 0, { type: 'input_json_delta', partial_json: '{}' })), 'no open tool_use'],
    ['tool input after its block stopped', (res) => (toolUseBlock(res, 0, 'toolu_1', 'now', ['{}']), blockDelta(res, 0, { type: 'input_json_delta', partial_json: '{}' })), 'no open tool_use'],
    ['a tool_use never stopped', (res) => (blockStart(res, 0, { type: 'tool_use', id: 'toolu_1', name: 'now', input: {} }), blockDelta(res, 0, { type: 'input_json_delta', partial_json: '{}' })), 'never stopped'],
    ['a tool_use without an id', (res) => blockStart(res, 0, { type: 'tool_use', name: 'now', input: {} }), 'no id or name'],
    ['a negative block index', (res) => blockStart(res, -1, { type: 'text', text: '' }), 'index'],
  ])('refuses %s as a bad response, not to be retried', async (_what, events, reason) => {
    script = (_req, res) => {
      startStream(res);
      events(res);
      finishStream(res, 1);
    };
    const error = await failure(callLlm(scripted.client, request()));
    expect(error).toMatchObject({ kind: 'bad_response', retryable: false });
    expect(error.message).toContain(reason);
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

describe('SseEventMeter', () => {
  const bytes = (text: string) => new TextEncoder().encode(text);

  it('counts the bytes since the last blank line, line ends left out', () => {
    const meter = new SseEventMeter();
    expect(meter.feed(bytes('event: a\ndata: 12'))).toBe(16);
    expect(meter.feed(bytes('34\n\nevent: b\n'))).toBe(18);
    expect(meter.feed(bytes('data: x'))).toBe(15);
  });

  it.each([
    ['LF', '\n'],
    ['CRLF', '\r\n'],
    ['CR', '\r'],
  ])('ends an event at a blank line with %s line ends, also when the ends are split between chunks', (_name, eol) => {
    const meter = new SseEventMeter();
    const stream = `data: one${eol}${eol}data: two`;
    let most = 0;
    for (const ch of stream) most = meter.feed(bytes(ch));
    expect(most).toBe('data: two'.length);
    expect(new SseEventMeter().feed(bytes(`data: one${eol}data: two`))).toBe(18);
  });

  it('returns the most an event held within the chunk, even when a blank line follows', () => {
    expect(new SseEventMeter().feed(bytes('data: long line\n\ndata: x'))).toBe(15);
  });
});
