import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sha256Hex } from '../../../../src/util/sha256-hex.js';
import { createLogger } from '../../../../src/obs/logger.js';
import { ToolLedger, createProviderSim, type ProviderSimOptions, type ProviderSimStats } from '../../../../src/dev/sim/provider-sim.js';

const ADMIN_KEY = 'admin-secret';
const ADMIN = { authorization: `Bearer ${ADMIN_KEY}` };
const TOOLS = ['order-lookup', 'kb-search', 'report', 'notify', 'crm-sync'];

function sim(extra: Partial<ProviderSimOptions> = {}): FastifyInstance {
  return createProviderSim({ adminKeySha256: sha256Hex(ADMIN_KEY), logger: createLogger('silent'), tools: TOOLS, random: () => 0, ...extra });
}

function messageBody(fields: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: 'claude-sim-1', max_tokens: 64, messages: [{ role: 'user', content: 'Where is my order?' }], ...fields };
}

let app: FastifyInstance;

function sendMessage(body: unknown, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: '/v1/messages', headers: { 'x-api-key': 'sim', 'anthropic-version': '2023-06-01', ...headers }, payload: body as InjectOptions['payload'] });
}

function callTool(name: string, payload: unknown, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: `/tools/${name}`, headers, payload: payload as InjectOptions['payload'] });
}

async function setFault(body: Record<string, unknown>): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'PUT', url: '/admin/faults', headers: ADMIN, payload: body });
}

async function stats(): Promise<ProviderSimStats> {
  return (await app.inject({ method: 'GET', url: '/admin/stats', headers: ADMIN })).json();
}

function sseEvents(payload: string): { event: string; data: Record<string, unknown> }[] {
  return payload
    .split('\n\n')
    .filter((frame) => frame.trim() !== '')
    .map((frame) => {
      const event = /^event: (.*)$/m.exec(frame)?.[1] ?? '';
      const data = /^data: (.*)$/m.exec(frame)?.[1] ?? '{}';
      return { event, data: JSON.parse(data) as Record<string, unknown> };
    });
}

/** Tool definitions as a caller offers them to the model. */
const AGENT_TOOLS = [
  { name: 'order-lookup', description: 'Looks up an order', input_schema: { type: 'object', properties: { orderId: { type: 'string' } }, required: ['orderId'] } },
  { name: 'kb-search', input_schema: { type: 'object', properties: { query: { type: 'string' }, limit: { type: 'integer' } }, required: ['query'] } },
];

type Block = { type: 'text'; text: string } | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> };

interface AgentAnswer {
  content: Block[];
  stop_reason: string;
  usage: { input_tokens: number; output_tokens: number };
}

/** Rebuilds the message a stream carries, as a client does, checking each tool input arrives in 2+ pieces. */
function assembleStream(payload: string): AgentAnswer {
  const events = sseEvents(payload);
  const content: Block[] = [];
  const json: string[] = [];
  const pieces: number[] = [];
  for (const { data } of events) {
    const index = data.index as number;
    if (data.type === 'content_block_start') content[index] = data.content_block as Block;
    const delta = data.delta as { type: string; text?: string; partial_json?: string } | undefined;
    const block = content[index];
    if (delta?.type === 'text_delta' && block?.type === 'text') block.text += delta.text;
    if (delta?.type === 'input_json_delta') {
      json[index] = (json[index] ?? '') + (delta.partial_json ?? '');
      pieces[index] = (pieces[index] ?? 0) + 1;
    }
    if (data.type === 'content_block_stop' && block?.type === 'tool_use') {
      expect(block.input).toEqual({});
      expect(pieces[index]).toBeGreaterThanOrEqual(2);
      block.input = JSON.parse(json[index] ?? '') as Record<string, unknown>;
    }
  }
  const final = events.find((event) => event.event === 'message_delta')!.data;
  return { content, stop_reason: (final.delta as { stop_reason: string }).stop_reason, usage: final.usage as AgentAnswer['usage'] };
}

async function askAgent(body: Record<string, unknown>): Promise<AgentAnswer> {
  const response = await sendMessage(body);
  expect(response.statusCode).toBe(200);
  return body.stream === true ? assembleStream(response.payload) : response.json();
}

/** Runs the loop a tool-using caller runs: each tool_use answered by the sim's own tools, until end_turn. */
async function runAgent(fields: Record<string, unknown>): Promise<AgentAnswer[]> {
  const messages: unknown[] = [{ role: 'user', content: 'Where is order A-1 and how do returns work?' }];
  const answers: AgentAnswer[] = [];
  for (let turn = 0; turn < 10; turn++) {
    const answer = await askAgent(messageBody({ tools: AGENT_TOOLS, messages, ...fields }));
    answers.push(answer);
    if (answer.stop_reason !== 'tool_use') return answers;
    messages.push({ role: 'assistant', content: answer.content });
    const results = [];
    for (const block of answer.content) {
      if (block.type !== 'tool_use') continue;
      const response = await callTool(block.name, { input: block.input });
      results.push({ type: 'tool_result', tool_use_id: block.id, content: response.payload, ...(response.statusCode !== 200 && { is_error: true }) });
    }
    messages.push({ role: 'user', content: results });
  }
  throw new Error('the agent never ended its turn');
}

beforeEach(() => {
  app = sim();
});

afterEach(async () => {
  await app.close();
});

describe('health and request ids', () => {
  it('answers /healthz with a request-id', async () => {
    const response = await app.inject({ method: 'GET', url: '/healthz' });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({ status: 'ok' });
    expect(response.headers['request-id']).toMatch(/^req_sim_[0-9a-f]{24}$/);
  });

  it('answers unknown routes with a 404 problem', async () => {
    const response = await app.inject({ method: 'GET', url: '/nope' });
    expect(response.statusCode).toBe(404);
    expect(response.headers['content-type']).toContain('application/problem+json');
    expect(response.json()).toMatchObject({ status: 404, code: 'not_found', requestId: response.headers['request-id'] });
  });
});

describe('POST /v1/messages', () => {
  it('answers like the Messages API, mentioning the last user message', async () => {
    const response = await sendMessage(
      messageBody({
        system: 'You are terse.',
        messages: [
          { role: 'user', content: 'first question' },
          { role: 'assistant', content: [{ type: 'text', text: 'first answer' }] },
          { role: 'user', content: [{ type: 'text', text: 'second question' }] },
        ],
      }),
    );
    expect(response.statusCode).toBe(200);
    const body = response.json();
    expect(body).toEqual({
      id: expect.stringMatching(/^msg_sim_[0-9a-f]{24}$/),
      type: 'message',
      role: 'assistant',
      model: 'claude-sim-1',
      content: [{ type: 'text', text: 'Simulated reply to: second question' }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      // "You are terse.\nfirst question\nfirst answer\nsecond question" is 59 characters.
      usage: { input_tokens: 15, output_tokens: 9, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    });
    expect(response.headers['request-id']).toMatch(/^req_sim_/);
  });

  it('is deterministic, reads tool results and keeps only the first 200 characters', async () => {
    const long = 'x'.repeat(300);
    const content = [
      { type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: long }] },
      { type: 'text', text: 'tail' },
    ];
    const first = await sendMessage(messageBody({ messages: [{ role: 'user', content }] }));
    const second = await sendMessage(messageBody({ messages: [{ role: 'user', content }] }));
    const text = `Simulated reply to: ${'x'.repeat(200)}`;
    expect(first.json().content).toEqual([{ type: 'text', text }]);
    expect(second.json().content).toEqual(first.json().content);
    expect(first.json().id).not.toBe(second.json().id);
  });

  it('accepts the authorization header instead of x-api-key but needs one of them', async () => {
    const bearer = await app.inject({ method: 'POST', url: '/v1/messages', headers: { authorization: 'Bearer anything' }, payload: messageBody() });
    expect(bearer.statusCode).toBe(200);
    const anonymous = await app.inject({ method: 'POST', url: '/v1/messages', payload: messageBody() });
    expect(anonymous.statusCode).toBe(401);
    expect(anonymous.json()).toEqual({ type: 'error', error: { type: 'authentication_error', message: 'x-api-key header is required' } });
  });

  it.each([
    [[], 'body: Input should be a valid dictionary'],
    [{ max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }, 'model: Field required'],
    [messageBody({ model: '' }), 'model: Input should be a non-empty string'],
    [messageBody({ model: 3 }), 'model: Input should be a non-empty string'],
    [messageBody({ max_tokens: undefined }), 'max_tokens: Field required'],
    [messageBody({ max_tokens: 0 }), 'max_tokens: Input should be a positive integer'],
    [messageBody({ max_tokens: 1.5 }), 'max_tokens: Input should be a positive integer'],
    [messageBody({ max_tokens: '10' }), 'max_tokens: Input should be a positive integer'],
    [messageBody({ messages: undefined }), 'messages: Field required'],
    [messageBody({ messages: 'hi' }), 'messages: Input should be a valid list'],
    [messageBody({ messages: [] }), 'messages: at least one message is required'],
    [messageBody({ messages: ['hi'] }), 'messages.0: Input should be a valid dictionary'],
    [messageBody({ messages: [{ content: 'hi' }] }), 'messages.0.role: Field required'],
    [messageBody({ messages: [{ role: 'system', content: 'hi' }] }), "messages.0.role: Input should be 'user' or 'assistant'"],
    [messageBody({ messages: [{ role: 'user' }] }), 'messages.0.content: Field required'],
    [messageBody({ messages: [{ role: 'user', content: 5 }] }), 'messages.0.content: Input should be a valid string or list of content blocks'],
    [messageBody({ messages: [{ role: 'user', content: [{ text: 'hi' }] }] }), 'messages.0.content.0.type: Field required'],
    [messageBody({ messages: [{ role: 'user', content: [{ type: 'video' }] }] }), 'messages.0.content.0.type: Input should be one of'],
    [messageBody({ messages: [{ role: 'user', content: [{ type: 'text' }] }] }), 'messages.0.content.0.text: Field required'],
    [messageBody({ messages: [{ role: 'user', content: [{ type: 'text', text: 1 }] }] }), 'messages.0.content.0.text: Input should be a valid string'],
    [messageBody({ messages: [{ role: 'user', content: [{ type: 'tool_result' }] }] }), 'messages.0.content.0.tool_use_id: Field required'],
    [
      messageBody({ messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'x', input: 'y' }] }] }),
      'messages.0.content.0.input: Input should be a valid dictionary',
    ],
    [
      messageBody({ messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: [{ type: 'tool_use' }] }] }] }),
      'messages.0.content.0.content.0.type: Input should be one of',
    ],
    [messageBody({ system: 5 }), 'system: Input should be a valid string or list of content blocks'],
    [messageBody({ system: [{ type: 'image', source: {} }] }), "system.0.type: Input should be one of 'text'"],
    [messageBody({ metadata: 'acme' }), 'metadata: Input should be a valid dictionary'],
    [messageBody({ metadata: { user_id: 42 } }), 'metadata.user_id: Input should be a valid string'],
    [messageBody({ stream: 'yes' }), 'stream: Input should be a valid boolean'],
    [messageBody({ tools: {} }), 'tools: Input should be a valid list'],
    [messageBody({ tools: ['order-lookup'] }), 'tools.0: Input should be a valid dictionary'],
    [messageBody({ tools: [{ input_schema: {} }] }), 'tools.0.name: Field required'],
    [messageBody({ tools: [{ name: '', input_schema: {} }] }), 'tools.0.name: Input should be a string of 1 to 128 characters'],
    [messageBody({ tools: [{ name: 't'.repeat(129), input_schema: {} }] }), 'tools.0.name: Input should be a string of 1 to 128 characters'],
    [messageBody({ tools: [{ name: 7, input_schema: {} }] }), 'tools.0.name: Input should be a string of 1 to 128 characters'],
    [messageBody({ tools: [{ name: 'a', description: 7, input_schema: {} }] }), 'tools.0.description: Input should be a valid string'],
    [messageBody({ tools: [AGENT_TOOLS[0], { name: 'b' }] }), 'tools.1.input_schema: Field required'],
    [messageBody({ tools: [{ name: 'a', input_schema: [] }] }), 'tools.0.input_schema: Input should be a valid dictionary'],
    [messageBody({ tools: [AGENT_TOOLS[0], AGENT_TOOLS[0]] }), 'tools: Tool names must be unique'],
    [messageBody({ tools: AGENT_TOOLS, system: '[sim-agent parallel=17]' }), 'system: [sim-agent] parallel must be an integer from 1 to 16'],
    [messageBody({ tools: AGENT_TOOLS, system: [{ type: 'text', text: '[sim-agent tool-turns=x]' }] }), 'system: [sim-agent] tool-turns must be'],
    [messageBody({ tools: AGENT_TOOLS, system: '[sim-agent unknown-tool=kb-search]' }), 'system: [sim-agent] unknown-tool "kb-search" is one of'],
  ])('rejects %j', async (body, message) => {
    const response = await sendMessage(body);
    expect(response.statusCode).toBe(400);
    const error = response.json();
    expect(error.type).toBe('error');
    expect(error.error.type).toBe('invalid_request_error');
    expect(error.error.message).toContain(message);
  });

  it('accepts every supported block type, system blocks and a null user_id', async () => {
    const response = await sendMessage(
      messageBody({
        system: [{ type: 'text', text: 'sys' }],
        metadata: { user_id: null },
        stream: false,
        messages: [
          { role: 'user', content: [{ type: 'image', source: { type: 'base64' } }, { type: 'document', source: { type: 'text' } }, { type: 'text', text: 'q' }] },
          {
            role: 'assistant',
            content: [
              { type: 'thinking', thinking: 'hmm', signature: 'sig' },
              { type: 'redacted_thinking', data: 'x' },
              { type: 'tool_use', id: 'toolu_1', name: 'order-lookup', input: {} },
            ],
          },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'shipped' }] },
        ],
      }),
    );
    expect(response.statusCode).toBe(200);
    expect(response.json().content[0].text).toBe('Simulated reply to: shipped');
  });

  it('maps malformed JSON and oversized bodies onto Anthropic errors', async () => {
    const malformed = await app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: { 'x-api-key': 'sim', 'content-type': 'application/json' },
      payload: '{"model":',
    });
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json().error.type).toBe('invalid_request_error');
    const huge = await sendMessage(messageBody({ messages: [{ role: 'user', content: 'x'.repeat(1024 * 1024) }] }));
    expect(huge.statusCode).toBe(413);
    expect(huge.json().error.type).toBe('request_too_large');
  });

  it('streams the Anthropic SSE event sequence', async () => {
    const response = await sendMessage(messageBody({ stream: true, messages: [{ role: 'user', content: 'stream me a reply please' }] }));
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toContain('text/event-stream');
    const events = sseEvents(response.payload);
    expect(events.map((event) => event.event)).toEqual([
      'message_start',
      'content_block_start',
      'ping',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    expect(events.every((event) => event.data.type === event.event)).toBe(true);
    const text = events
      .filter((event) => event.event === 'content_block_delta')
      .map((event) => (event.data.delta as { text: string }).text)
      .join('');
    expect(text).toBe('Simulated reply to: stream me a reply please');
    const usage = { input_tokens: expect.any(Number), cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
    expect(events[0]?.data.message).toMatchObject({ content: [], stop_reason: null, model: 'claude-sim-1', usage: { ...usage, output_tokens: 1 } });
    // The final counts are cumulative: input and cache counts again, with the whole output.
    expect(events.at(-2)?.data).toEqual({
      type: 'message_delta',
      delta: { stop_reason: 'end_turn', stop_sequence: null },
      usage: { ...usage, output_tokens: Math.ceil(text.length / 4) },
    });
  });

  it('spreads the latency over the streamed chunks', async () => {
    await setFault({ target: 'anthropic', latencyMs: 150 });
    const started = Date.now();
    const response = await sendMessage(messageBody({ stream: true }));
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
    expect(sseEvents(response.payload).at(-1)?.event).toBe('message_stop');
  });

  it('applies the configured latency before answering', async () => {
    await setFault({ target: 'anthropic', latencyMs: 120 });
    const started = Date.now();
    expect((await sendMessage(messageBody())).statusCode).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(110);
  });

  it.each([
    [429, 'rate_limit_error', '1'],
    [500, 'api_error', undefined],
    [529, 'overloaded_error', undefined],
  ])('answers a %i fault like Anthropic', async (errorStatus, type, retryAfter) => {
    await setFault({ target: 'anthropic', errorStatus });
    const response = await sendMessage(messageBody());
    expect(response.statusCode).toBe(errorStatus);
    expect(response.json()).toEqual({ type: 'error', error: { type, message: `simulated ${errorStatus} from provider-sim` } });
    expect(response.headers['retry-after']).toBe(retryAfter);
    expect(response.headers['request-id']).toMatch(/^req_sim_/);
  });

  it('sends the configured retry-after and fails only the configured share of calls', async () => {
    app = sim({ random: (() => { const rolls = [0.1, 0.9]; return () => rolls.shift() ?? 0; })() });
    await setFault({ target: 'anthropic', errorStatus: 429, errorRate: 0.5, retryAfterSec: 7 });
    const failed = await sendMessage(messageBody());
    expect(failed.statusCode).toBe(429);
    expect(failed.headers['retry-after']).toBe('7');
    expect((await sendMessage(messageBody())).statusCode).toBe(200);
    expect((await stats()).errors).toEqual({ anthropic: 1 });
  });
});

describe('POST /v1/messages with tools: the scripted agent', () => {
  it.each([false, true])('plays the tool turns, fed back with tool results, then answers with their counts (stream: %s)', async (stream) => {
    const answers = await runAgent({ stream, system: 'You are a support agent.\n[sim-agent tool-turns=3 parallel=2 unknown-tool=refund]' });
    expect(answers.map((answer) => answer.stop_reason)).toEqual(['tool_use', 'tool_use', 'tool_use', 'end_turn']);
    const toolUse = (name: string, input: Record<string, unknown>) => ({ type: 'tool_use', id: expect.stringMatching(/^toolu_sim_[0-9a-f]{24}$/), name, input });
    expect(answers[0]?.content).toEqual([
      { type: 'text', text: 'Looking up order-lookup, kb-search, refund.' },
      toolUse('order-lookup', { orderId: 'A-1000' }),
      toolUse('kb-search', { query: 'query 0' }),
      toolUse('refund', {}),
    ]);
    expect(answers[1]?.content).toEqual([{ type: 'text', text: 'Looking up order-lookup, kb-search.' }, toolUse('order-lookup', { orderId: 'A-1001' }), toolUse('kb-search', { query: 'query 1' })]);
    expect(answers[2]?.content.slice(1)).toEqual([toolUse('order-lookup', { orderId: 'A-1002' }), toolUse('kb-search', { query: 'query 2' })]);
    // The unknown tool's call is the one that failed (404 from /tools/refund).
    expect(answers[3]?.content).toEqual([{ type: 'text', text: 'Answered from 7 tool results (1 failed).' }]);
    const ids = answers.flatMap((answer) => answer.content.flatMap((block) => (block.type === 'tool_use' ? [block.id] : [])));
    expect(new Set(ids).size).toBe(7);
    // Each turn reads the whole conversation so far, so the prompt grows.
    const inputTokens = answers.map((answer) => answer.usage.input_tokens);
    expect(inputTokens).toEqual([...inputTokens].sort((a, b) => a - b));
    expect(new Set(inputTokens).size).toBe(4);
    // /tools/refund answered 404 before counting a call.
    expect((await stats()).calls).toEqual({ anthropic: 4, 'order-lookup': 3, 'kb-search': 3 });
  });

  it('streams a tool turn with the API event sequence', async () => {
    const response = await sendMessage(messageBody({ stream: true, tools: AGENT_TOOLS, system: '[sim-agent parallel=1]' }));
    const events = sseEvents(response.payload);
    const order = events.map((event) => (event.event === 'content_block_delta' ? `delta:${(event.data.delta as { type: string }).type}` : event.event));
    const deduplicated = order.filter((name, i) => name !== order[i - 1]);
    expect(deduplicated).toEqual([
      'message_start',
      'content_block_start',
      'ping',
      'delta:text_delta',
      'content_block_stop',
      'content_block_start',
      'delta:input_json_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    expect(events.filter((event) => event.event === 'content_block_start').map((event) => event.data)).toEqual([
      { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
      { type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: expect.stringMatching(/^toolu_sim_/), name: 'order-lookup', input: {} } },
    ]);
    const partial = events.filter((event) => (event.data.delta as { type?: string } | undefined)?.type === 'input_json_delta');
    expect(partial.every((event) => event.data.index === 1)).toBe(true);
    expect(partial.map((event) => (event.data.delta as { partial_json: string }).partial_json).join('')).toBe('{"orderId":"A-1000"}');
    expect(events.at(-2)?.data.delta).toEqual({ stop_reason: 'tool_use', stop_sequence: null });
    expect(events[0]?.data.message).toMatchObject({ content: [], stop_reason: null });
  });

  it('uses two tool turns of two calls without a directive, and reads a directive from system blocks', async () => {
    const plain = await runAgent({});
    expect(plain.map((answer) => answer.content.length)).toEqual([3, 3, 1]);
    expect(plain.at(-1)?.content).toEqual([{ type: 'text', text: 'Answered from 4 tool results (0 failed).' }]);
    const blocks = await runAgent({ system: [{ type: 'text', text: 'Be brief.' }, { type: 'text', text: '[sim-agent tool-turns=1 parallel=1 invalid-input]' }] });
    expect(blocks[0]?.content[1]).toMatchObject({ name: 'order-lookup', input: {} });
    expect(blocks.map((answer) => answer.stop_reason)).toEqual(['tool_use', 'end_turn']);
  });

  it('answers at once with tool-turns=0', async () => {
    const answer = await askAgent(messageBody({ tools: AGENT_TOOLS, system: '[sim-agent tool-turns=0]' }));
    expect(answer).toMatchObject({ content: [{ type: 'text', text: 'Answered from 0 tool results (0 failed).' }], stop_reason: 'end_turn' });
  });

  it('ignores the directive of a request without tools', async () => {
    const answer = await askAgent(messageBody({ system: '[sim-agent parallel=99]', tools: [] }));
    expect(answer.content).toEqual([{ type: 'text', text: 'Simulated reply to: Where is my order?' }]);
  });

  it('counts tool definitions, tool inputs and tool results as input tokens, and the tool inputs as output', async () => {
    const system = '[sim-agent parallel=1]';
    const messages = [
      { role: 'user', content: 'Where is it?' },
      { role: 'assistant', content: [{ type: 'text', text: 'Looking up order-lookup.' }, { type: 'tool_use', id: 'toolu_1', name: 'order-lookup', input: { orderId: 'A-1000' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'shipped' }] }] },
    ];
    const answer = await askAgent(messageBody({ system, messages, tools: AGENT_TOOLS }));
    const prompt = [system, 'Where is it?', 'Looking up order-lookup. {"orderId":"A-1000"}', 'shipped', JSON.stringify(AGENT_TOOLS)].join('\n');
    expect(answer.usage.input_tokens).toBe(Math.ceil(prompt.length / 4));
    expect(answer.usage.output_tokens).toBe(Math.ceil('Looking up kb-search.{"query":"query 1"}'.length / 4));
  });

  it('accepts 128 tools and refuses 129', async () => {
    const tools = Array.from({ length: 129 }, (_, i) => ({ name: `tool-${i}`, input_schema: { type: 'object' } }));
    const answer = await askAgent(messageBody({ tools: tools.slice(0, 128), system: '[sim-agent parallel=16]' }));
    expect(answer.content).toHaveLength(17);
    const refused = await sendMessage(messageBody({ tools }));
    expect(refused.statusCode).toBe(400);
    expect(refused.json().error).toEqual({ type: 'invalid_request_error', message: 'tools: List should have at most 128 items' });
  });

  it('uses the same tool_use ids in every turn with repeat-ids', async () => {
    const answers = await runAgent({ stream: true, system: '[sim-agent tool-turns=2 parallel=2 repeat-ids]' });
    const ids = answers.map((answer) => answer.content.flatMap((block) => (block.type === 'tool_use' ? [block.id] : [])));
    expect(ids).toEqual([['toolu_sim_0', 'toolu_sim_1'], ['toolu_sim_0', 'toolu_sim_1'], []]);
  });

  it('applies faults and latency to every turn', async () => {
    const failed = await sendMessage(messageBody({ tools: AGENT_TOOLS }), { 'x-simulate-failure': '529' });
    expect(failed.statusCode).toBe(529);
    expect(failed.json().error.type).toBe('overloaded_error');
    await setFault({ target: 'anthropic', latencyMs: 100 });
    const started = Date.now();
    expect((await askAgent(messageBody({ tools: AGENT_TOOLS, stream: true }))).stop_reason).toBe('tool_use');
    expect(Date.now() - started).toBeGreaterThanOrEqual(90);
    expect(await stats()).toMatchObject({ calls: { anthropic: 2 }, errors: { anthropic: 1 } });
  });
});

describe('answers that break the request\'s word', () => {
  it('streams answerBytes of text in deltas of at most 16 KiB, whatever max_tokens allowed, and reports reportedOutputTokens', async () => {
    expect((await setFault({ target: 'anthropic', answerBytes: 100_000, reportedOutputTokens: 1 })).statusCode).toBe(200);
    const response = await sendMessage(messageBody({ stream: true, max_tokens: 16, messages: [{ role: 'user', content: 'héllo' }] }));
    const deltas = sseEvents(response.payload).flatMap((e) => ((e.data.delta as { type?: string } | undefined)?.type === 'text_delta' ? [(e.data.delta as { text: string }).text] : []));
    const text = deltas.join('');
    expect(Buffer.byteLength(text)).toBe(100_000);
    expect(text.startsWith('Simulated reply to: héllo The simulator was told to answer at length.')).toBe(true);
    expect(Math.max(...deltas.map((d) => d.length))).toBeLessThanOrEqual(16_384);
    expect(sseEvents(response.payload).find((e) => e.event === 'message_delta')!.data.usage).toMatchObject({ output_tokens: 1 });
  });

  it('cuts the answer to answerBytes between characters', async () => {
    await setFault({ target: 'anthropic', answerBytes: 22 });
    const answer = (await sendMessage(messageBody({ messages: [{ role: 'user', content: 'ééé' }] }))).json();
    // "Simulated reply to: é" is 22 bytes; the next "é" would not fit.
    expect(answer.content).toEqual([{ type: 'text', text: 'Simulated reply to: é' }]);
    expect(answer.usage.output_tokens).toBe(Math.ceil('Simulated reply to: é'.length / 4));
  });
});

describe('X-Simulate-Failure', () => {
  it.each([
    ['429,retry-after=3', 429, '3'],
    ['529', 529, undefined],
    ['500', 500, undefined],
  ])('forces %s for one request', async (header, status, retryAfter) => {
    const response = await sendMessage(messageBody(), { 'x-simulate-failure': header });
    expect(response.statusCode).toBe(status);
    expect(response.headers['retry-after']).toBe(retryAfter);
    expect((await sendMessage(messageBody())).statusCode).toBe(200);
  });

  it('overrides the target profile, including latency', async () => {
    await setFault({ target: 'anthropic', errorStatus: 500 });
    const started = Date.now();
    const response = await sendMessage(messageBody(), { 'x-simulate-failure': 'slow=100' });
    expect(response.statusCode).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(90);
  });

  it.each(['', 'teapot', '429,500', 'slow=-5', 'hang,429', 'retry-after=2'])('rejects %j with a 400 before counting the call', async (header) => {
    const response = await sendMessage(messageBody(), { 'x-simulate-failure': header });
    expect(response.statusCode).toBe(400);
    expect(response.json().error.type).toBe('invalid_request_error');
    expect(response.json().error.message).toMatch(/^x-simulate-failure: /);
    const tool = await callTool('notify', {}, { 'x-simulate-failure': header });
    expect(tool.statusCode).toBe(400);
    expect(tool.json()).toMatchObject({ code: 'invalid_request', errors: [{ path: 'x-simulate-failure' }] });
    expect((await stats()).calls).toEqual({});
  });

  it('applies to tools as well', async () => {
    const response = await callTool('order-lookup', {}, { 'x-simulate-failure': '529,retry-after=2' });
    expect(response.statusCode).toBe(529);
    expect(response.headers['retry-after']).toBe('2');
    expect(response.json()).toMatchObject({ status: 529, code: 'overloaded', retryable: true, retryAfterSec: 2, title: 'Overloaded' });
  });
});

describe('stats', () => {
  it('measures concurrency per target and per tenant across targets, and counts each target\'s calls per tenant', async () => {
    await setFault({ target: 'anthropic', latencyMs: 150 });
    await setFault({ target: 'report', latencyMs: 150 });
    const asTenant = (tenant: string) => sendMessage(messageBody({ metadata: { user_id: tenant } }));
    const responses = await Promise.all([
      asTenant('acme'),
      asTenant('acme'),
      asTenant('globex'),
      callTool('report', {}, { 'x-sluice-tenant': 'acme' }),
      sendMessage(messageBody()),
    ]);
    expect(responses.map((response) => response.statusCode)).toEqual([200, 200, 200, 200, 200]);
    expect(await stats()).toEqual({
      calls: { anthropic: 4, report: 1 },
      // The LLM call's tenant is its metadata.user_id, a tool call's its X-Sluice-Tenant header.
      callsByTenant: { anthropic: { acme: 2, globex: 1, _none: 1 }, report: { acme: 1 } },
      errors: {},
      rateLimited: {},
      concurrent: { anthropic: 0, report: 0 },
      maxConcurrent: { byTarget: { anthropic: 4, report: 1 }, byTenant: { acme: 3, globex: 1, _none: 1 }, total: 5 },
      sideEffects: { report: 1 },
      duplicateDeliveries: {},
    });
  });

  it('counts errors and resets everything on request', async () => {
    await sendMessage(messageBody(), { 'x-simulate-failure': '500' });
    await callTool('notify', {}, { 'idempotency-key': 'k1' });
    expect(await stats()).toMatchObject({ calls: { anthropic: 1, notify: 1 }, errors: { anthropic: 1 }, sideEffects: { notify: 1 } });
    const reset = await app.inject({ method: 'POST', url: '/admin/stats/reset', headers: ADMIN });
    expect(reset.statusCode).toBe(204);
    expect(await stats()).toEqual({
      calls: {},
      callsByTenant: {},
      errors: {},
      rateLimited: {},
      concurrent: {},
      maxConcurrent: { byTarget: {}, byTenant: {}, total: 0 },
      sideEffects: {},
      duplicateDeliveries: {},
    });
    // The idempotency records are tool state, not counters: a redelivery after a reset is still a duplicate.
    await callTool('notify', {}, { 'idempotency-key': 'k1' });
    expect(await stats()).toMatchObject({ sideEffects: {}, duplicateDeliveries: { notify: 1 } });
  });
});

describe('demo tools', () => {
  it('answers deterministically per tool', async () => {
    const lookup = await callTool('order-lookup', { input: { orderId: 'ord_42' } });
    expect(lookup.statusCode).toBe(200);
    expect(lookup.json()).toEqual({
      orderId: 'ord_42',
      status: 'shipped',
      carrier: expect.stringMatching(/^(UPS|DHL|FedEx)$/),
      eta: expect.stringMatching(/^2030-01-0[2-8]$/),
    });
    expect((await callTool('order-lookup', { input: { orderId: 'ord_42' } })).json()).toEqual(lookup.json());
    expect((await callTool('order-lookup', undefined)).json()).toMatchObject({ orderId: 'ord_demo' });
    expect((await callTool('report', { input: { rows: 12 } })).json()).toEqual({ rows: 12, summary: 'Simulated report over 12 rows' });
    expect((await callTool('report', { input: { rows: -1 } })).json()).toMatchObject({ rows: 100 });
    expect((await callTool('notify', { input: { to: 'ops' } })).json()).toEqual({ delivered: true });
    const search = (await callTool('kb-search', { input: { query: 'late parcel' } })).json();
    expect(search).toEqual({
      query: 'late parcel',
      articles: [
        { title: expect.any(String), snippet: expect.stringContaining('"late parcel"') },
        { title: expect.any(String), snippet: expect.stringContaining('"late parcel"') },
      ],
    });
    expect(search.articles[0].title).not.toBe(search.articles[1].title);
    expect((await callTool('kb-search', { input: { query: 'late parcel' } })).json()).toEqual(search);
    expect((await callTool('kb-search', {})).json()).toMatchObject({ query: 'getting started' });
    expect((await callTool('crm-sync', { input: { id: 7 } })).json()).toEqual({ ok: true, echo: { id: 7 } });
    expect((await callTool('crm-sync', {})).json()).toEqual({ ok: true, echo: null });
  });

  it('answers unknown tools and non-object bodies with problems', async () => {
    const unknown = await callTool('rm-rf', {});
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json()).toMatchObject({ status: 404, code: 'unknown_tool', detail: 'unknown tool "rm-rf"' });
    const array = await callTool('notify', [1, 2]);
    expect(array.statusCode).toBe(400);
    expect(array.json()).toMatchObject({ code: 'invalid_request', errors: [{ path: 'body', message: 'must be a JSON object' }] });
  });

  it('applies each idempotency key once per tool and replays the first response', async () => {
    const headers = { 'idempotency-key': 'run_1:step_2', 'x-sluice-tenant': 'acme' };
    const first = await callTool('order-lookup', { input: { orderId: 'A' } }, headers);
    const again = await callTool('order-lookup', { input: { orderId: 'B' } }, headers);
    expect(again.json()).toEqual(first.json());
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    expect(again.headers['idempotent-replayed']).toBe('true');
    await callTool('notify', {}, headers);
    await callTool('notify', {});
    await callTool('notify', {});
    expect(await stats()).toMatchObject({
      calls: { 'order-lookup': 2, notify: 3 },
      sideEffects: { 'order-lookup': 1, notify: 3 },
      duplicateDeliveries: { 'order-lookup': 1 },
      maxConcurrent: { byTenant: { acme: 1, _none: 1 } },
    });
  });

  it('applies no side effect when the call fails', async () => {
    await setFault({ target: 'notify', errorStatus: 500 });
    const failed = await callTool('notify', {}, { 'idempotency-key': 'k' });
    expect(failed.statusCode).toBe(500);
    expect(failed.json()).toMatchObject({ code: 'internal_error', retryable: true });
    expect(failed.headers['retry-after']).toBeUndefined();
    await app.inject({ method: 'DELETE', url: '/admin/faults', headers: ADMIN });
    expect((await callTool('notify', {}, { 'idempotency-key': 'k' })).headers['idempotent-replayed']).toBeUndefined();
    expect(await stats()).toMatchObject({ sideEffects: { notify: 1 }, duplicateDeliveries: {}, errors: { notify: 1 } });
  });

  it('rejects empty and oversized idempotency keys', async () => {
    for (const key of ['', 'k'.repeat(257)]) {
      const response = await callTool('notify', {}, { 'idempotency-key': key });
      expect(response.statusCode).toBe(400);
      expect(response.json()).toMatchObject({ errors: [{ path: 'idempotency-key' }] });
    }
    expect((await callTool('notify', {}, { 'idempotency-key': 'k'.repeat(256) })).statusCode).toBe(200);
  });

  it('forgets the oldest key once the ledger is full', () => {
    const ledger = new ToolLedger({ maxKeys: 2, maxResponseBytes: 1_000, maxTotalBytes: 1_000_000 });
    const respond = (body: string) => () => body;
    ledger.deliver('notify', 'a', respond('first a'));
    ledger.deliver('notify', 'b', respond('first b'));
    ledger.deliver('notify', 'c', respond('first c'));
    expect(ledger.deliver('notify', 'b', respond('second b'))).toEqual({ body: 'first b', replayed: true });
    expect(ledger.deliver('notify', 'a', respond('second a'))).toEqual({ body: 'second a', replayed: false });
    expect(ledger.deliver('report', 'a', respond('report a'))).toEqual({ body: 'report a', replayed: false });
    expect(ledger.counters()).toEqual({ sideEffects: { notify: 4, report: 1 }, duplicateDeliveries: { notify: 1 } });
  });

  /** A slot is JSON.stringify([tool, key]): ["notify","a"] is 14 bytes; a body of n x's is n + 2. */
  const body = (n: number) => () => 'x'.repeat(n);

  it('forgets the oldest keys once the kept bytes would pass maxTotalBytes', () => {
    // Each entry costs 14 + 52 = 66 bytes: two fit in 140, a third pushes the oldest out.
    const ledger = new ToolLedger({ maxKeys: 100, maxResponseBytes: 1_000, maxTotalBytes: 140 });
    ledger.deliver('notify', 'a', body(50));
    ledger.deliver('notify', 'b', body(50));
    expect(ledger.deliver('notify', 'a', body(1))).toEqual({ body: 'x'.repeat(50), replayed: true });
    ledger.deliver('notify', 'c', body(50));
    expect(ledger.deliver('notify', 'a', body(1))).toEqual({ body: 'x', replayed: false });
    expect(ledger.deliver('notify', 'c', body(1))).toEqual({ body: 'x'.repeat(50), replayed: true });
  });

  it('forgets as many old keys as one large response needs', () => {
    const ledger = new ToolLedger({ maxKeys: 100, maxResponseBytes: 1_000, maxTotalBytes: 200 });
    for (const key of ['a', 'b', 'c', 'd', 'e']) ledger.deliver('notify', key, body(10));
    // Five entries of 14 + 12 = 26 bytes; f costs 14 + 152 = 166, and only e still fits beside it.
    ledger.deliver('notify', 'f', body(150));
    expect(ledger.deliver('notify', 'f', body(0)).replayed).toBe(true);
    expect(ledger.deliver('notify', 'e', body(0)).replayed).toBe(true);
    expect(ledger.deliver('notify', 'd', body(0)).replayed).toBe(false);
  });

  it('keeps only the key of a response over maxResponseBytes: a repeat has no second effect and is answered afresh', () => {
    const ledger = new ToolLedger({ maxKeys: 100, maxResponseBytes: 100, maxTotalBytes: 1_000 });
    let effects = 0;
    const echo = (text: string) => () => (effects++, text);
    expect(ledger.deliver('notify', 'big', echo('y'.repeat(99)))).toEqual({ body: 'y'.repeat(99), replayed: false });
    expect(ledger.deliver('notify', 'big', echo('y'.repeat(99)))).toEqual({ body: 'y'.repeat(99), replayed: true });
    expect(ledger.counters()).toEqual({ sideEffects: { notify: 1 }, duplicateDeliveries: { notify: 1 } });
    // Only the key counted: 900 more bytes of kept responses still fit.
    ledger.deliver('notify', 'k1', body(98));
    expect(ledger.deliver('notify', 'big', body(1)).replayed).toBe(true);
    expect(effects).toBe(2);
  });

  it('keeps a response of exactly maxResponseBytes', () => {
    const ledger = new ToolLedger({ maxKeys: 100, maxResponseBytes: 100, maxTotalBytes: 1_000 });
    ledger.deliver('notify', 'k', body(98));
    expect(ledger.deliver('notify', 'k', body(1))).toEqual({ body: 'x'.repeat(98), replayed: true });
  });

  it('never holds more than maxTotalBytes however many large responses arrive', () => {
    const ledger = new ToolLedger({ maxKeys: 1_000_000, maxResponseBytes: 10_000, maxTotalBytes: 50_000 });
    for (let i = 0; i < 1_000; i++) ledger.deliver('report', `k${i}`, body(9_000));
    // Each entry costs 17 + 9,002 bytes: the five newest fit in 50,000, a sixth would not.
    for (let i = 999; i >= 995; i--) expect(ledger.deliver('report', `k${i}`, body(0)).replayed).toBe(true);
    expect(ledger.deliver('report', 'k994', body(0)).replayed).toBe(false);
  });
});

describe('admin faults', () => {
  it('sets a profile, lists all targets and resets to the baseline', async () => {
    const set = await setFault({ target: 'report', latencyMs: 5, jitterMs: 2, errorStatus: 529, errorRate: 0.1 });
    expect(set.statusCode).toBe(200);
    expect(set.json()).toEqual({ target: 'report', latencyMs: 5, jitterMs: 2, errorStatus: 529, errorRate: 0.1, hang: false });
    const listed = await app.inject({ method: 'GET', url: '/admin/faults', headers: ADMIN });
    const zero = { latencyMs: 0, jitterMs: 0, errorRate: 0, hang: false };
    expect(listed.json()).toEqual({
      anthropic: zero,
      'order-lookup': zero,
      'kb-search': zero,
      report: { latencyMs: 5, jitterMs: 2, errorStatus: 529, errorRate: 0.1, hang: false },
      notify: zero,
      'crm-sync': zero,
    });
    // A PUT replaces the profile rather than merging into the previous one.
    expect((await setFault({ target: 'report', hang: true })).json()).toEqual({ target: 'report', ...zero, hang: true });
    const cleared = await app.inject({ method: 'DELETE', url: '/admin/faults', headers: ADMIN });
    expect(cleared.statusCode).toBe(204);
    expect((await app.inject({ method: 'GET', url: '/admin/faults', headers: ADMIN })).json().report).toEqual(zero);
  });

  it('rejects invalid profiles and unknown targets with field errors', async () => {
    const invalid = await setFault({ target: 'anthropic', errorRate: 2, latencyMs: -1 });
    expect(invalid.statusCode).toBe(400);
    expect(invalid.headers['content-type']).toContain('application/problem+json');
    expect(invalid.json()).toMatchObject({
      status: 400,
      code: 'invalid_request',
      retryable: false,
      errors: [
        { path: 'latencyMs', message: 'must be an integer between 0 and 600000' },
        { path: 'errorRate', message: 'must be a number between 0 and 1' },
      ],
    });
    const unknown = await setFault({ target: 'openai' });
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json().errors).toEqual([{ path: 'target', message: expect.stringContaining('anthropic') }]);
  });

  it('starts from and returns to the configured defaults', async () => {
    app = sim({ defaults: { anthropic: { latencyMs: 30, jitterMs: 5 } } });
    const baseline = { latencyMs: 30, jitterMs: 5, errorRate: 0, hang: false };
    expect((await app.inject({ method: 'GET', url: '/admin/faults', headers: ADMIN })).json().anthropic).toEqual(baseline);
    expect((await setFault({ target: 'anthropic', errorStatus: 529 })).json()).toEqual({ target: 'anthropic', ...baseline, errorStatus: 529, errorRate: 1 });
    await app.inject({ method: 'DELETE', url: '/admin/faults', headers: ADMIN });
    expect((await app.inject({ method: 'GET', url: '/admin/faults', headers: ADMIN })).json().anthropic).toEqual(baseline);
  });

  it('refuses bad construction options', () => {
    expect(() => sim({ defaults: { anthropic: { latencyMs: -1 } } })).toThrow(/invalid default profile for anthropic: latencyMs/);
    expect(() => sim({ defaults: { openai: { latencyMs: 1 } } })).toThrow(/unknown targets: openai/);
    expect(() => sim({ tools: ['notify', 'notify'] })).toThrow(/unique/);
    expect(() => sim({ tools: ['anthropic'] })).toThrow(/unique/);
    expect(() => sim({ adminKeySha256: 'admin' })).toThrow(/adminKeySha256/);
  });
});

describe('rate limits', () => {
  /** 2026-12-01T00:00:00Z, stepped by hand. */
  const T0 = Date.UTC(2026, 11, 1);
  let clock = T0;
  // messageBody()'s prompt is "\nWhere is my order?" (5 tokens); its answer is 10 tokens; max_tokens is 64.
  const INPUT = 5;
  const OUTPUT = 10;

  function limitHeaders(response: LightMyRequestResponse): Record<string, unknown> {
    return Object.fromEntries(Object.entries(response.headers).filter(([name]) => name.includes('ratelimit')));
  }

  beforeEach(async () => {
    clock = T0;
    await app.close();
    app = sim({ now: () => clock });
  });

  it('rejects invalid limits with field errors, like the other fault fields', async () => {
    const invalid = await setFault({ target: 'anthropic', latencyMs: -1, rateLimit: { requestsPerMinute: 0, requestsPerSecond: 5, burst: 3 } });
    expect(invalid.statusCode).toBe(400);
    expect(invalid.headers['content-type']).toContain('application/problem+json');
    expect(invalid.json()).toMatchObject({
      status: 400,
      code: 'invalid_request',
      errors: [
        { path: 'latencyMs', message: 'must be an integer between 0 and 600000' },
        { path: 'rateLimit.requestsPerMinute', message: 'must be a number from 1 to 1000000000' },
        { path: 'rateLimit.requestsPerSecond', message: expect.stringContaining('is not a limit of the anthropic target') },
        { path: 'rateLimit.burst', message: 'is not a known field' },
      ],
    });
    const toolTokens = await setFault({ target: 'report', rateLimit: { inputTokensPerMinute: 100 } });
    expect(toolTokens.json().errors).toEqual([{ path: 'rateLimit.inputTokensPerMinute', message: 'is not a limit of a tool (requestsPerSecond or requestsPerMinute)' }]);
    expect((await setFault({ target: 'report', rateLimit: 'fast' })).json().errors).toEqual([{ path: 'rateLimit', message: 'must be an object of limits, or null to remove them' }]);
    expect((await app.inject({ method: 'GET', url: '/admin/faults', headers: ADMIN })).json().anthropic).not.toHaveProperty('rateLimit');
  });

  it('sets a limit with the other fields of a profile, and replaces it with the profile', async () => {
    const set = await setFault({ target: 'anthropic', latencyMs: 5, rateLimit: { requestsPerMinute: 50 } });
    expect(set.json()).toEqual({ target: 'anthropic', latencyMs: 5, jitterMs: 0, errorRate: 0, hang: false, rateLimit: { requestsPerMinute: 50 } });
    expect((await app.inject({ method: 'GET', url: '/admin/faults', headers: ADMIN })).json().anthropic.rateLimit).toEqual({ requestsPerMinute: 50 });
    // A PUT replaces the whole profile: a limit not named again falls back to the baseline (none).
    expect((await setFault({ target: 'anthropic', latencyMs: 7 })).json()).not.toHaveProperty('rateLimit');
  });

  it('sends no rate-limit headers without a limit', async () => {
    expect(limitHeaders(await sendMessage(messageBody()))).toEqual({});
    expect(limitHeaders(await callTool('notify', {}))).toEqual({});
  });

  it("reports every bucket in Anthropic's headers after the call's draw, the output held at max_tokens", async () => {
    await setFault({ target: 'anthropic', rateLimit: { requestsPerMinute: 50, inputTokensPerMinute: 1_000, outputTokensPerMinute: 600 } });
    const response = await sendMessage(messageBody());
    expect(response.statusCode).toBe(200);
    expect(response.json().usage).toMatchObject({ input_tokens: INPUT, output_tokens: OUTPUT });
    expect(limitHeaders(response)).toEqual({
      'anthropic-ratelimit-requests-limit': '50',
      'anthropic-ratelimit-requests-remaining': '49',
      'anthropic-ratelimit-requests-reset': '2026-12-01T00:00:02Z',
      'anthropic-ratelimit-input-tokens-limit': '1000',
      'anthropic-ratelimit-input-tokens-remaining': String(1_000 - INPUT),
      'anthropic-ratelimit-input-tokens-reset': '2026-12-01T00:00:01Z',
      'anthropic-ratelimit-output-tokens-limit': '600',
      'anthropic-ratelimit-output-tokens-remaining': String(600 - 64),
      'anthropic-ratelimit-output-tokens-reset': '2026-12-01T00:00:07Z',
      'anthropic-ratelimit-tokens-limit': '1600',
      'anthropic-ratelimit-tokens-remaining': String(1_000 - INPUT + 600 - 64),
      'anthropic-ratelimit-tokens-reset': '2026-12-01T00:00:07Z',
    });
    // The unused part of max_tokens came back once the answer was sent.
    const next = await sendMessage(messageBody());
    expect(next.headers['anthropic-ratelimit-output-tokens-remaining']).toBe(String(600 - OUTPUT - 64));
    expect(next.headers['anthropic-ratelimit-input-tokens-remaining']).toBe(String(1_000 - 2 * INPUT));
  });

  it('sends the headers on streamed answers, fault errors and refused requests too', async () => {
    await setFault({ target: 'anthropic', rateLimit: { requestsPerMinute: 10 } });
    const streamed = await sendMessage(messageBody({ stream: true }));
    expect(streamed.headers['content-type']).toContain('text/event-stream');
    expect(streamed.headers['anthropic-ratelimit-requests-remaining']).toBe('9');
    const faulted = await sendMessage(messageBody(), { 'x-simulate-failure': '500' });
    expect(faulted.statusCode).toBe(500);
    expect(faulted.headers['anthropic-ratelimit-requests-remaining']).toBe('8');
    const invalid = await sendMessage(messageBody({ max_tokens: 0 }));
    expect(invalid.statusCode).toBe(400);
    expect(invalid.headers['anthropic-ratelimit-requests-remaining']).toBe('8');
    const anonymous = await app.inject({ method: 'POST', url: '/v1/messages', payload: messageBody() });
    expect(anonymous.statusCode).toBe(401);
    expect(anonymous.headers['anthropic-ratelimit-requests-limit']).toBe('10');
    const malformed = await app.inject({ method: 'POST', url: '/v1/messages', headers: { 'x-api-key': 'sim', 'content-type': 'application/json' }, payload: '{"model":' });
    expect(malformed.statusCode).toBe(400);
    expect(malformed.headers['anthropic-ratelimit-requests-remaining']).toBe('8');
  });

  it('refuses a call over the limit with a 429 rate_limit_error and retry-after, counted apart from faults, then recovers', async () => {
    await setFault({ target: 'anthropic', rateLimit: { requestsPerMinute: 2 } });
    expect((await sendMessage(messageBody())).statusCode).toBe(200);
    expect((await sendMessage(messageBody())).statusCode).toBe(200);
    clock += 1_000;
    const refused = await sendMessage(messageBody());
    expect(refused.statusCode).toBe(429);
    expect(refused.json()).toEqual({ type: 'error', error: { type: 'rate_limit_error', message: 'This request would exceed the rate limit of 2 requests per minute (provider-sim)' } });
    // One request refills in 30 s; 1 s has passed.
    expect(refused.headers['retry-after']).toBe('29');
    expect(refused.headers['x-should-retry']).toBe('true');
    expect(refused.headers['anthropic-ratelimit-requests-remaining']).toBe('0');
    expect(refused.headers['anthropic-ratelimit-requests-reset']).toBe('2026-12-01T00:01:00Z');
    // A fault-injected 429 is an error, not a rate-limit refusal.
    expect((await sendMessage(messageBody(), { 'x-simulate-failure': '429' })).statusCode).toBe(429);
    expect(await stats()).toMatchObject({ calls: { anthropic: 4 }, errors: {}, rateLimited: { anthropic: 2 } });
    clock += 28_999;
    expect((await sendMessage(messageBody())).headers['retry-after']).toBe('1');
    clock += 1;
    const recovered = await sendMessage(messageBody());
    expect(recovered.statusCode).toBe(200);
    expect(recovered.headers['anthropic-ratelimit-requests-remaining']).toBe('0');
    expect((await stats()).rateLimited).toEqual({ anthropic: 3 });
  });

  it('draws input tokens by the prompt estimate and refuses what the bucket cannot cover', async () => {
    await setFault({ target: 'anthropic', rateLimit: { inputTokensPerMinute: 12 } });
    expect((await sendMessage(messageBody())).statusCode).toBe(200);
    expect((await sendMessage(messageBody())).statusCode).toBe(200);
    const refused = await sendMessage(messageBody());
    expect(refused.statusCode).toBe(429);
    expect(refused.json().error.message).toBe('This request would exceed the rate limit of 12 input tokens per minute (provider-sim)');
    // 2 tokens left, 5 needed: 3 tokens at 12 a minute take 15 s.
    expect(refused.headers['retry-after']).toBe('15');
    expect(refused.headers['anthropic-ratelimit-tokens-remaining']).toBe('2');
    expect(refused.headers).not.toHaveProperty('anthropic-ratelimit-requests-limit');
  });

  it('refuses a max_tokens above the output limit every time, as a provider does', async () => {
    await setFault({ target: 'anthropic', rateLimit: { outputTokensPerMinute: 32 } });
    for (let i = 0; i < 2; i++) {
      const refused = await sendMessage(messageBody());
      expect(refused.statusCode).toBe(429);
      expect(refused.json().error.message).toBe("This request's 64 output tokens exceed the rate limit of 32 output tokens per minute on their own (provider-sim)");
      expect(refused.headers['retry-after']).toBe('1');
    }
    expect((await sendMessage(messageBody({ max_tokens: 32 }))).statusCode).toBe(200);
  });

  it('gives back all of max_tokens when a call fails or never answers', async () => {
    await setFault({ target: 'anthropic', rateLimit: { outputTokensPerMinute: 600 } });
    expect((await sendMessage(messageBody(), { 'x-simulate-failure': '529' })).headers['anthropic-ratelimit-output-tokens-remaining']).toBe('536');
    expect((await sendMessage(messageBody())).headers['anthropic-ratelimit-output-tokens-remaining']).toBe('536');
    expect((await sendMessage(messageBody({ max_tokens: 1 }))).headers['anthropic-ratelimit-output-tokens-remaining']).toBe(String(600 - OUTPUT - 1));
  });

  it('clears a limit with null and restores the baseline limit, full, on DELETE', async () => {
    app = sim({ now: () => clock, defaults: { anthropic: { latencyMs: 0, rateLimit: { requestsPerMinute: 1 } } } });
    expect((await app.inject({ method: 'GET', url: '/admin/faults', headers: ADMIN })).json().anthropic.rateLimit).toEqual({ requestsPerMinute: 1 });
    expect((await sendMessage(messageBody())).statusCode).toBe(200);
    expect((await sendMessage(messageBody())).statusCode).toBe(429);
    expect((await setFault({ target: 'anthropic', rateLimit: null })).json()).not.toHaveProperty('rateLimit');
    const unlimited = await sendMessage(messageBody());
    expect(unlimited.statusCode).toBe(200);
    expect(limitHeaders(unlimited)).toEqual({});
    expect((await app.inject({ method: 'DELETE', url: '/admin/faults', headers: ADMIN })).statusCode).toBe(204);
    expect((await sendMessage(messageBody())).statusCode).toBe(200);
    expect((await sendMessage(messageBody())).statusCode).toBe(429);
    // DELETE refills even a bucket whose limit it leaves as it was.
    await app.inject({ method: 'DELETE', url: '/admin/faults', headers: ADMIN });
    expect((await sendMessage(messageBody())).statusCode).toBe(200);
  });

  it('keeps the level of an unchanged limit across a PUT, and starts a changed one full', async () => {
    await setFault({ target: 'anthropic', rateLimit: { requestsPerMinute: 1 } });
    await sendMessage(messageBody());
    await setFault({ target: 'anthropic', latencyMs: 1, rateLimit: { requestsPerMinute: 1 } });
    expect((await sendMessage(messageBody())).statusCode).toBe(429);
    await setFault({ target: 'anthropic', rateLimit: { requestsPerMinute: 2 } });
    expect((await sendMessage(messageBody())).headers['anthropic-ratelimit-requests-remaining']).toBe('1');
  });

  it('limits a tool per second with a problem 429 and the IETF headers', async () => {
    await setFault({ target: 'order-lookup', rateLimit: { requestsPerSecond: 2 } });
    const first = await callTool('order-lookup', {});
    expect(first.statusCode).toBe(200);
    expect(limitHeaders(first)).toEqual({ 'ratelimit-limit': '2', 'ratelimit-remaining': '1', 'ratelimit-reset': '1' });
    await callTool('order-lookup', {}, { 'idempotency-key': 'k' });
    const refused = await callTool('order-lookup', {}, { 'idempotency-key': 'k2' });
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.json()).toMatchObject({ status: 429, code: 'rate_limited', retryable: true, retryAfterSec: 1, detail: 'This request would exceed the rate limit of 2 requests per second (provider-sim)' });
    expect(limitHeaders(refused)).toEqual({ 'ratelimit-limit': '2', 'ratelimit-remaining': '0', 'ratelimit-reset': '1' });
    // Another target is not limited by this one's bucket.
    expect((await callTool('report', {})).statusCode).toBe(200);
    clock += 500;
    expect((await callTool('order-lookup', {}, { 'idempotency-key': 'k2' })).statusCode).toBe(200);
    // A refused call had no side effect: k2's first effect is the admitted call.
    expect(await stats()).toMatchObject({
      calls: { 'order-lookup': 4, report: 1 },
      rateLimited: { 'order-lookup': 1 },
      sideEffects: { 'order-lookup': 3, report: 1 },
      duplicateDeliveries: {},
    });
  });

  it('resets the rateLimited counts with the other stats', async () => {
    await setFault({ target: 'notify', rateLimit: { requestsPerMinute: 1 } });
    await callTool('notify', {});
    await callTool('notify', {});
    expect((await stats()).rateLimited).toEqual({ notify: 1 });
    expect((await app.inject({ method: 'POST', url: '/admin/stats/reset', headers: ADMIN })).statusCode).toBe(204);
    expect((await stats()).rateLimited).toEqual({});
    // The buckets are the provider's state, not measurements: a reset leaves them as they are.
    expect((await callTool('notify', {})).statusCode).toBe(429);
  });
});

describe('admin auth', () => {
  const routes: InjectOptions[] = [
    { method: 'GET', url: '/admin/faults' },
    { method: 'PUT', url: '/admin/faults', payload: { target: 'anthropic' } },
    { method: 'DELETE', url: '/admin/faults' },
    { method: 'GET', url: '/admin/stats' },
    { method: 'POST', url: '/admin/stats/reset' },
  ];

  it.each([undefined, 'Bearer wrong', `Basic ${ADMIN_KEY}`, `Bearer ${ADMIN_KEY}x`, 'Bearer '])('refuses authorization %j on every admin route', async (authorization) => {
    for (const route of routes) {
      const response = await app.inject({ ...route, headers: authorization === undefined ? {} : { authorization } });
      expect(response.statusCode).toBe(401);
      expect(response.headers['content-type']).toContain('application/problem+json');
      expect(response.headers['www-authenticate']).toBe('Bearer');
      expect(response.json()).toMatchObject({ status: 401, code: 'unauthorized', retryable: false });
    }
    expect((await app.inject({ method: 'GET', url: '/admin/faults', headers: ADMIN })).json().anthropic.errorRate).toBe(0);
  });

  it('accepts the admin key', async () => {
    for (const route of routes) {
      const response = await app.inject({ ...route, headers: ADMIN });
      expect(response.statusCode).toBeLessThan(300);
    }
  });
});
