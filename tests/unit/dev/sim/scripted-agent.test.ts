import { describe, expect, it } from 'vitest';
import {
  DEFAULT_SCRIPT,
  nextTurn,
  parseAgentDirective,
  readConversation,
  sampleInput,
  type AgentScript,
  type AgentTool,
  type Conversation,
} from '../../../../src/dev/sim/scripted-agent.js';

const ORDER_LOOKUP: AgentTool = {
  name: 'order-lookup',
  input_schema: { type: 'object', properties: { orderId: { type: 'string' } }, required: ['orderId'] },
};
const KB_SEARCH: AgentTool = {
  name: 'kb-search',
  description: 'Searches the knowledge base',
  input_schema: { type: 'object', properties: { query: { type: 'string' }, limit: { type: 'integer' } }, required: ['query'] },
};
const NOTIFY: AgentTool = { name: 'notify', input_schema: { type: 'object' } };

function script(fields: Partial<AgentScript> = {}): AgentScript {
  return { ...DEFAULT_SCRIPT, ...fields };
}

function conversation(assistantTurns: number, toolResults = 0, failedToolResults = 0): Conversation {
  return { assistantTurns, toolResults, failedToolResults };
}

describe('parseAgentDirective', () => {
  it('gives the default script without a directive', () => {
    expect(parseAgentDirective('You are a support agent.', [])).toEqual({
      ok: true,
      value: { toolTurns: 2, parallel: 2, unknownTool: undefined, invalidInput: false, repeatIds: false },
    });
  });

  it('reads every key from a line of a longer prompt', () => {
    const system = 'You are a support agent.\n[sim-agent tool-turns=3 parallel=4 unknown-tool=refund invalid-input repeat-ids]\nBe brief.';
    expect(parseAgentDirective(system, ['order-lookup'])).toEqual({
      ok: true,
      value: { toolTurns: 3, parallel: 4, unknownTool: 'refund', invalidInput: true, repeatIds: true },
    });
  });

  it('keeps the defaults of keys not given, and accepts an empty directive and extra spaces', () => {
    expect(parseAgentDirective('[sim-agent parallel=1]', [])).toEqual({ ok: true, value: script({ parallel: 1 }) });
    expect(parseAgentDirective('[sim-agent]', [])).toEqual({ ok: true, value: script() });
    expect(parseAgentDirective('x [sim-agent   tool-turns=0\t ] y', [])).toEqual({ ok: true, value: script({ toolTurns: 0 }) });
  });

  it.each([
    ['tool-turns=0', { toolTurns: 0 }],
    ['tool-turns=10000', { toolTurns: 10_000 }],
    ['tool-turns=007', { toolTurns: 7 }],
    ['parallel=1', { parallel: 1 }],
    ['parallel=16', { parallel: 16 }],
    [`unknown-tool=${'t'.repeat(128)}`, { unknownTool: 't'.repeat(128) }],
  ])('accepts the bound %s', (token, fields) => {
    expect(parseAgentDirective(`[sim-agent ${token}]`, [])).toEqual({ ok: true, value: script(fields) });
  });

  it.each([
    ['[sim-agent tool-turns=10001]', 'tool-turns must be an integer from 0 to 10000'],
    ['[sim-agent tool-turns=-1]', 'tool-turns must be an integer from 0 to 10000'],
    ['[sim-agent tool-turns=1.5]', 'tool-turns must be an integer from 0 to 10000'],
    ['[sim-agent tool-turns=two]', 'tool-turns must be an integer from 0 to 10000'],
    ['[sim-agent tool-turns=]', 'tool-turns must be an integer from 0 to 10000'],
    ['[sim-agent tool-turns]', 'tool-turns must be an integer from 0 to 10000'],
    ['[sim-agent tool-turns=99999999999999999999]', 'tool-turns must be an integer from 0 to 10000'],
    ['[sim-agent parallel=0]', 'parallel must be an integer from 1 to 16'],
    ['[sim-agent parallel=17]', 'parallel must be an integer from 1 to 16'],
    ['[sim-agent unknown-tool]', 'unknown-tool must name a tool of 1 to 128 characters'],
    ['[sim-agent unknown-tool=]', 'unknown-tool must name a tool of 1 to 128 characters'],
    [`[sim-agent unknown-tool=${'t'.repeat(129)}]`, 'unknown-tool must name a tool of 1 to 128 characters'],
    ['[sim-agent unknown-tool=order-lookup]', 'unknown-tool "order-lookup" is one of the request\'s tools'],
    ['[sim-agent invalid-input=yes]', 'invalid-input takes no value'],
    ['[sim-agent repeat-ids=1]', 'repeat-ids takes no value'],
    ['[sim-agent parallel=2 parallel=3]', 'parallel given twice'],
    ['[sim-agent turns=2]', 'unknown key "turns"'],
    ['[sim-agent tool-turns=2', 'must be one line like'],
    ['[sim-agent tool-turns=2\nparallel=2]', 'must be one line like'],
    ['[sim-agentic]', 'must be one line like'],
    ['[sim-agent] [sim-agent]', 'more than one [sim-agent] directive'],
    ['[sim-agent tool-turns=1]\n[sim-agent parallel=1]', 'more than one [sim-agent] directive'],
  ])('refuses %j', (system, message) => {
    const result = parseAgentDirective(system, ['order-lookup']);
    expect(result.ok).toBe(false);
    expect(!result.ok && result.message).toContain(message);
  });
});

describe('readConversation', () => {
  it('counts assistant turns, tool results and failed tool results', () => {
    expect(
      readConversation([
        { role: 'user', content: 'Where is my order?' },
        { role: 'assistant', content: [{ type: 'text', text: 'Looking up' }, { type: 'tool_use', id: 't1', name: 'x', input: {} }] },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 't1', content: 'ok' },
            { type: 'tool_result', tool_use_id: 't2', is_error: true, content: 'boom' },
            { type: 'tool_result', tool_use_id: 't3', is_error: false },
            { type: 'text', text: 'and?' },
          ],
        },
        { role: 'assistant', content: 'plain text' },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't4', is_error: true }] },
      ]),
    ).toEqual({ assistantTurns: 2, toolResults: 4, failedToolResults: 2 });
  });

  it('finds nothing in a first user message', () => {
    expect(readConversation([{ role: 'user', content: 'hi' }])).toEqual(conversation(0));
  });

  it('ignores what is not a block', () => {
    expect(readConversation([{ role: 'user', content: [null, 'tool_result', { is_error: true }] }])).toEqual(conversation(0));
  });
});

describe('nextTurn', () => {
  const tools = [ORDER_LOOKUP, KB_SEARCH, NOTIFY];

  it('asks for `parallel` tools while turns remain, then answers with the counts', () => {
    expect(nextTurn(script(), tools, conversation(0))).toEqual({
      text: 'Looking up order-lookup, kb-search.',
      calls: [
        { name: 'order-lookup', input: { orderId: 'A-1000' } },
        { name: 'kb-search', input: { query: 'query 0' } },
      ],
      stopReason: 'tool_use',
    });
    expect(nextTurn(script(), tools, conversation(1, 2))).toEqual({
      text: 'Looking up notify, order-lookup.',
      calls: [
        { name: 'notify', input: {} },
        { name: 'order-lookup', input: { orderId: 'A-1001' } },
      ],
      stopReason: 'tool_use',
    });
    expect(nextTurn(script(), tools, conversation(2, 4, 1))).toEqual({ text: 'Answered from 4 tool results (1 failed).', calls: [], stopReason: 'end_turn' });
  });

  it('walks the tools round-robin from turn * parallel', () => {
    const names = (turn: number, parallel: number) => nextTurn(script({ toolTurns: 10, parallel }), tools, conversation(turn)).calls.map((call) => call.name);
    expect(names(0, 1)).toEqual(['order-lookup']);
    expect(names(1, 1)).toEqual(['kb-search']);
    expect(names(2, 1)).toEqual(['notify']);
    expect(names(3, 1)).toEqual(['order-lookup']);
    expect(names(2, 2)).toEqual(['kb-search', 'notify']);
    expect(names(4, 2)).toEqual(['notify', 'order-lookup']);
  });

  it('asks for each tool once when parallel is more than the tools offered', () => {
    const turn = nextTurn(script({ parallel: 16 }), [ORDER_LOOKUP, KB_SEARCH], conversation(1));
    expect(turn.calls.map((call) => call.name)).toEqual(['order-lookup', 'kb-search']);
    expect(nextTurn(script({ parallel: 3 }), [ORDER_LOOKUP, KB_SEARCH], conversation(1)).calls.map((call) => call.name)).toEqual(['kb-search', 'order-lookup']);
    expect(nextTurn(script({ parallel: 5 }), [NOTIFY], conversation(0)).calls).toEqual([{ name: 'notify', input: {} }]);
  });

  it('answers at once with tool-turns=0, and on any turn past the last', () => {
    expect(nextTurn(script({ toolTurns: 0 }), tools, conversation(0))).toEqual({ text: 'Answered from 0 tool results (0 failed).', calls: [], stopReason: 'end_turn' });
    expect(nextTurn(script({ toolTurns: 1 }), tools, conversation(5, 1)).text).toBe('Answered from 1 tool result (0 failed).');
  });

  it('answers at once when no tools are offered', () => {
    expect(nextTurn(script(), [], conversation(0)).stopReason).toBe('end_turn');
  });

  it('also asks for the unknown tool, on the first tool turn only', () => {
    const unknown = script({ unknownTool: 'refund' });
    expect(nextTurn(unknown, tools, conversation(0))).toMatchObject({
      text: 'Looking up order-lookup, kb-search, refund.',
      calls: [{ name: 'order-lookup' }, { name: 'kb-search' }, { name: 'refund', input: {} }],
    });
    expect(nextTurn(unknown, tools, conversation(1)).calls.map((call) => call.name)).toEqual(['notify', 'order-lookup']);
    expect(nextTurn(script({ unknownTool: 'refund', toolTurns: 0 }), tools, conversation(0)).calls).toEqual([]);
  });

  it('gives the first tool call of the conversation an empty input with invalid-input', () => {
    const invalid = script({ invalidInput: true });
    expect(nextTurn(invalid, tools, conversation(0)).calls).toEqual([
      { name: 'order-lookup', input: {} },
      { name: 'kb-search', input: { query: 'query 0' } },
    ]);
    expect(nextTurn(invalid, tools, conversation(1)).calls[1]).toEqual({ name: 'order-lookup', input: { orderId: 'A-1001' } });
  });
});

describe('sampleInput', () => {
  it('fills only the required properties', () => {
    expect(sampleInput(KB_SEARCH.input_schema, 3)).toEqual({ query: 'query 3' });
  });

  it.each([
    [{ type: 'string' }, 'name', 'name 2'],
    [{ type: 'string' }, 'orderId', 'A-1002'],
    [{ type: 'string' }, 'id', 'A-1002'],
    [{ type: 'string' }, 'CUSTOMER_ID', 'A-1002'],
    [{ type: 'string' }, 'order-id', 'A-1002'],
    [{ type: 'string' }, 'orderID', 'A-1002'],
    [{ type: 'string' }, 'paid', 'paid 2'],
    [{ type: 'integer' }, 'n', 1],
    [{ type: 'number' }, 'n', 1],
    [{ type: 'boolean' }, 'b', true],
    [{ type: 'array', items: { type: 'string' } }, 'a', []],
    [{ enum: ['express', 'standard'] }, 'e', 'express'],
    [{ type: 'string', enum: ['b', 'a'] }, 'e', 'b'],
    [{ type: 'string', enum: [] }, 'e', 'e 2'],
    [{ type: 'null' }, 'x', null],
    [{ type: ['string', 'null'] }, 'x', null],
    [{}, 'x', null],
    ['string', 'x', null],
  ])('samples %j as %s → %j', (property, name, value) => {
    expect(sampleInput({ type: 'object', properties: { [name]: property }, required: [name] }, 2)).toEqual({ [name]: value });
  });

  it('recurses into objects, keeping to their required properties', () => {
    const schema = {
      type: 'object',
      properties: {
        customer: {
          type: 'object',
          properties: { customerId: { type: 'string' }, tier: { type: 'string' }, address: { type: 'object', properties: { zip: { type: 'string' } }, required: ['zip'] } },
          required: ['customerId', 'address'],
        },
      },
      required: ['customer'],
    };
    expect(sampleInput(schema, 1)).toEqual({ customer: { customerId: 'A-1001', address: { zip: 'zip 1' } } });
  });

  it('gives null to a required property the schema does not describe', () => {
    expect(sampleInput({ type: 'object', required: ['ghost'] }, 0)).toEqual({ ghost: null });
  });

  it('gives {} to schemas without required properties or with malformed ones', () => {
    expect(sampleInput({ type: 'object', properties: { a: { type: 'string' } } }, 0)).toEqual({});
    expect(sampleInput({ properties: 'nope', required: 'a' }, 0)).toEqual({});
    expect(sampleInput({ properties: { a: { type: 'integer' } }, required: [5, 'a'] }, 0)).toEqual({ a: 1 });
  });
});
