import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { sha256Hex } from '../../../../src/util/sha256-hex.js';
import { createLogger } from '../../../../src/obs/logger.js';
import { createProviderSim, type ProviderSimStats } from '../../../../src/dev/sim/provider-sim.js';

const ADMIN = { authorization: 'Bearer admin' };
const PARAMS = { model: 'claude-sim-1', max_tokens: 64, messages: [{ role: 'user' as const, content: 'What is the status of ord_7?' }] };
const EXPECTED_TEXT = 'Simulated reply to: What is the status of ord_7?';

let app: FastifyInstance;
let client: Anthropic;
let port: number;

async function setFault(body: Record<string, unknown>): Promise<void> {
  const response = await app.inject({ method: 'PUT', url: '/admin/faults', headers: ADMIN, payload: body });
  expect(response.statusCode).toBe(200);
}

async function stats(): Promise<ProviderSimStats> {
  return (await app.inject({ method: 'GET', url: '/admin/stats', headers: ADMIN })).json();
}

async function expectNothingInFlight(): Promise<void> {
  await vi.waitFor(async () => expect((await stats()).concurrent).toEqual({ anthropic: 0 }), { timeout: 1000, interval: 10 });
}

beforeAll(async () => {
  app = createProviderSim({ adminKeySha256: sha256Hex('admin'), logger: createLogger('silent'), tools: ['order-lookup', 'kb-search'] });
  await app.listen({ host: '127.0.0.1', port: 0 });
  port = (app.server.address() as AddressInfo).port;
  client = new Anthropic({ apiKey: 'sim', baseURL: `http://127.0.0.1:${port}`, maxRetries: 0 });
});

afterAll(async () => {
  await app.close();
});

beforeEach(async () => {
  await app.inject({ method: 'DELETE', url: '/admin/faults', headers: ADMIN });
  await app.inject({ method: 'POST', url: '/admin/stats/reset', headers: ADMIN });
});

describe('provider-sim with the real @anthropic-ai/sdk client', () => {
  it('returns the text and usage from messages.create()', async () => {
    const { data: message, response } = await client.messages.create({ ...PARAMS, metadata: { user_id: 'acme' } }).withResponse();
    expect(message.content).toEqual([{ type: 'text', text: EXPECTED_TEXT }]);
    expect(message.stop_reason).toBe('end_turn');
    expect(message.usage.output_tokens).toBe(Math.ceil(EXPECTED_TEXT.length / 4));
    expect(response.headers.get('request-id')).toMatch(/^req_sim_/);
    expect((await stats()).maxConcurrent.byTenant).toEqual({ acme: 1 });
  });

  it('surfaces a 429 fault as RateLimitError with retry-after', async () => {
    await setFault({ target: 'anthropic', errorStatus: 429, retryAfterSec: 3 });
    const error = await client.messages.create(PARAMS).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(Anthropic.RateLimitError);
    const rateLimited = error as InstanceType<typeof Anthropic.RateLimitError>;
    expect(rateLimited.status).toBe(429);
    expect(rateLimited.headers.get('retry-after')).toBe('3');
    expect(rateLimited.type).toBe('rate_limit_error');
  });

  it('reports rate limits in the headers and surfaces a refusal as RateLimitError with retry-after', async () => {
    await setFault({ target: 'anthropic', rateLimit: { requestsPerMinute: 1, outputTokensPerMinute: 1_000 } });
    const { response } = await client.messages.create(PARAMS).withResponse();
    expect(response.headers.get('anthropic-ratelimit-requests-remaining')).toBe('0');
    expect(response.headers.get('anthropic-ratelimit-output-tokens-remaining')).toBe(String(1_000 - PARAMS.max_tokens));
    expect(response.headers.get('anthropic-ratelimit-tokens-limit')).toBe('1000');
    const error = await client.messages.create(PARAMS).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(Anthropic.RateLimitError);
    const rateLimited = error as InstanceType<typeof Anthropic.RateLimitError>;
    expect(rateLimited.type).toBe('rate_limit_error');
    // A minute to refill one request, less the moments since the first call.
    expect(Number(rateLimited.headers.get('retry-after'))).toBeGreaterThanOrEqual(58);
    expect(rateLimited.headers.get('anthropic-ratelimit-requests-reset')).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    expect((await stats()).rateLimited).toEqual({ anthropic: 1 });
  });

  it('sends the rate-limit headers with a stream', async () => {
    await setFault({ target: 'anthropic', rateLimit: { requestsPerMinute: 5 } });
    const { response } = await client.messages.create({ ...PARAMS, stream: true }).withResponse();
    expect(response.headers.get('content-type')).toContain('text/event-stream');
    expect(response.headers.get('anthropic-ratelimit-requests-remaining')).toBe('4');
    await expectNothingInFlight();
  });

  it('surfaces a 529 fault as an APIError with status 529', async () => {
    await setFault({ target: 'anthropic', errorStatus: 529 });
    const error = await client.messages.create(PARAMS).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(Anthropic.APIError);
    expect((error as InstanceType<typeof Anthropic.APIError>).status).toBe(529);
    expect((error as InstanceType<typeof Anthropic.APIError>).type).toBe('overloaded_error');
  });

  it('honours X-Simulate-Failure sent as a request header', async () => {
    const error = await client.messages.create(PARAMS, { headers: { 'X-Simulate-Failure': '500' } }).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(Anthropic.InternalServerError);
    expect((error as InstanceType<typeof Anthropic.APIError>).status).toBe(500);
  });

  it('streams through messages.stream() and finalMessage()', async () => {
    await setFault({ target: 'anthropic', latencyMs: 100 });
    const stream = client.messages.stream(PARAMS);
    const deltas: string[] = [];
    stream.on('text', (delta) => deltas.push(delta));
    const message = await stream.finalMessage();
    expect(message.content).toEqual([{ type: 'text', text: EXPECTED_TEXT }]);
    expect(deltas.join('')).toBe(EXPECTED_TEXT);
    expect(deltas.length).toBeGreaterThan(1);
    expect(message.usage).toMatchObject({ output_tokens: Math.ceil(EXPECTED_TEXT.length / 4) });
    await expectNothingInFlight();
  });

  it('hangs until the SDK timeout cuts the call, then forgets it', async () => {
    await setFault({ target: 'anthropic', hang: true });
    const started = Date.now();
    const error = await client.messages.create(PARAMS, { timeout: 200 }).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(Anthropic.APIConnectionTimeoutError);
    expect(Date.now() - started).toBeLessThan(1000);
    await expectNothingInFlight();
    expect((await stats()).maxConcurrent.byTarget).toEqual({ anthropic: 1 });
  });

  it('stops a slow stream when the client aborts it', async () => {
    await setFault({ target: 'anthropic', latencyMs: 5000 });
    const stream = client.messages.stream(PARAMS);
    await new Promise<void>((resolve) => stream.on('connect', () => resolve()));
    expect((await stats()).concurrent).toEqual({ anthropic: 1 });
    stream.abort();
    await expect(stream.finalMessage()).rejects.toBeInstanceOf(Anthropic.APIUserAbortError);
    await expectNothingInFlight();
  });
});

const AGENT_TOOLS: Anthropic.Tool[] = [
  { name: 'order-lookup', description: 'Looks up an order', input_schema: { type: 'object', properties: { orderId: { type: 'string' } }, required: ['orderId'] } },
  { name: 'kb-search', description: 'Searches the help centre', input_schema: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] } },
];

/** Answers a tool_use from the sim's own demo tools, as an agent step would. */
async function runTool(block: Anthropic.ToolUseBlock): Promise<Anthropic.ToolResultBlockParam> {
  const response = await fetch(`http://127.0.0.1:${port}/tools/${block.name}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input: block.input }),
  });
  return { type: 'tool_result', tool_use_id: block.id, content: await response.text(), ...(!response.ok && { is_error: true }) };
}

describe('provider-sim as a scripted agent, with the real @anthropic-ai/sdk client', () => {
  it.each(['create', 'stream'] as const)('runs a tool-use loop of three turns of two calls to its end_turn answer (%s)', async (mode) => {
    const params = {
      model: 'claude-sim-1',
      max_tokens: 256,
      system: 'You are a support agent.\n[sim-agent tool-turns=3 parallel=2 invalid-input]',
      tools: AGENT_TOOLS,
    };
    const messages: Anthropic.MessageParam[] = [{ role: 'user', content: 'Where is order A-1 and how do returns work?' }];
    const answers: Anthropic.Message[] = [];
    for (let turn = 0; turn < 4; turn++) {
      const answer = mode === 'create' ? await client.messages.create({ ...params, messages }) : await client.messages.stream({ ...params, messages }).finalMessage();
      answers.push(answer);
      if (answer.stop_reason !== 'tool_use') break;
      const calls = answer.content.filter((block): block is Anthropic.ToolUseBlock => block.type === 'tool_use');
      messages.push({ role: 'assistant', content: answer.content }, { role: 'user', content: await Promise.all(calls.map(runTool)) });
    }
    expect(answers.map((answer) => answer.stop_reason)).toEqual(['tool_use', 'tool_use', 'tool_use', 'end_turn']);
    const calls = answers.map((answer) => answer.content.flatMap((block) => (block.type === 'tool_use' ? [[block.name, block.input]] : [])));
    expect(calls).toEqual([
      [['order-lookup', {}], ['kb-search', { query: 'query 0' }]],
      [['order-lookup', { orderId: 'A-1001' }], ['kb-search', { query: 'query 1' }]],
      [['order-lookup', { orderId: 'A-1002' }], ['kb-search', { query: 'query 2' }]],
      [],
    ]);
    expect(answers[0]?.content[0]).toMatchObject({ type: 'text', text: 'Looking up order-lookup, kb-search.' });
    expect(answers[3]?.content).toEqual([{ type: 'text', text: 'Answered from 6 tool results (0 failed).' }]);
    expect(answers.every((answer) => answer.usage.output_tokens > 0)).toBe(true);
    expect((await stats()).calls).toEqual({ anthropic: 4, 'order-lookup': 3, 'kb-search': 3 });
  });

  it('reports each tool input in pieces while streaming', async () => {
    const stream = client.messages.stream({ ...PARAMS, tools: AGENT_TOOLS, system: '[sim-agent parallel=1]' });
    const pieces: string[] = [];
    stream.on('inputJson', (partial) => pieces.push(partial));
    const message = await stream.finalMessage();
    expect(message.stop_reason).toBe('tool_use');
    expect(message.content[1]).toEqual({ type: 'tool_use', id: expect.stringMatching(/^toolu_sim_/), name: 'order-lookup', input: { orderId: 'A-1000' } });
    expect(pieces.length).toBeGreaterThanOrEqual(2);
    expect(pieces.join('')).toBe('{"orderId":"A-1000"}');
  });

  it('surfaces tools validation and a malformed directive as BadRequestError', async () => {
    const noSchema = await client.messages
      .create({ ...PARAMS, tools: [{ name: 'order-lookup' } as Anthropic.Tool] })
      .catch((caught: unknown) => caught);
    expect(noSchema).toBeInstanceOf(Anthropic.BadRequestError);
    expect((noSchema as InstanceType<typeof Anthropic.BadRequestError>).message).toContain('tools.0.input_schema: Field required');
    const directive = await client.messages.create({ ...PARAMS, tools: AGENT_TOOLS, system: '[sim-agent tool-turns=10001]' }).catch((caught: unknown) => caught);
    expect(directive).toBeInstanceOf(Anthropic.BadRequestError);
    expect((directive as InstanceType<typeof Anthropic.BadRequestError>).message).toContain('system: [sim-agent] tool-turns must be an integer from 0 to 10000');
  });
});

describe('provider-sim shutdown', () => {
  it('closes promptly while a call hangs', async () => {
    const hanging = createProviderSim({ adminKeySha256: sha256Hex('admin'), logger: createLogger('silent'), tools: [] });
    await hanging.listen({ host: '127.0.0.1', port: 0 });
    const { port: hangingPort } = hanging.server.address() as AddressInfo;
    const dropped = new Promise<string>((resolve) => {
      const req = httpRequest({ host: '127.0.0.1', port: hangingPort, method: 'POST', path: '/v1/messages', headers: { 'x-api-key': 'sim', 'content-type': 'application/json', 'x-simulate-failure': 'hang' } });
      req.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
      req.on('response', () => resolve('answered'));
      req.end(JSON.stringify(PARAMS));
    });
    await vi.waitFor(async () => {
      const response = await hanging.inject({ method: 'GET', url: '/admin/stats', headers: ADMIN });
      expect(response.json().concurrent).toEqual({ anthropic: 1 });
    }, { timeout: 1000, interval: 10 });
    const started = Date.now();
    await hanging.close();
    expect(Date.now() - started).toBeLessThan(500);
    expect(await dropped).toBe('ECONNRESET');
  });
});
