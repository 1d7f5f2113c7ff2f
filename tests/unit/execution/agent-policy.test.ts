import { describe, expect, it } from 'vitest';
import { toolInputProblem } from '../../../src/config/tool-input-schema.js';
import { agentStepDeadline, boundBeforeTurn, planTurn, turnProgress, type AgentBounds, type AgentTally } from '../../../src/execution/agent-policy.js';
import type { LlmContentBlock } from '../../../src/steps/llm-call.js';

const bounds: AgentBounds = { maxTurns: 4, maxToolCalls: 5, maxTokens: 1_000, maxParallelTools: 2, deadlineShare: 1 };
const tally = (over: Partial<AgentTally> = {}): AgentTally => ({ turns: 1, toolCalls: 0, tokens: 100, ...over });
const text = (t: string): LlmContentBlock => ({ type: 'text', text: t });
const use = (id: string, name: string, input: Record<string, unknown> = { orderId: 'A-1' }): LlmContentBlock => ({ type: 'tool_use', id, name, input });
/** A tool_use whose streamed input was not a JSON object. */
const unreadable = (id: string, name: string, inputError?: string): LlmContentBlock => ({ type: 'tool_use', id, name, input: undefined, ...(inputError ? { inputError } : {}) });
const orderSchema = { type: 'object', properties: { orderId: { type: 'string', minLength: 1 } }, required: ['orderId'] };
const tools = new Map<string, Record<string, unknown>>([
  ['order-lookup', orderSchema],
  ['kb-search', { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] }],
]);
const plan = (content: LlmContentBlock[], t: AgentTally = tally(), b: AgentBounds = bounds) => planTurn({ content, tally: t, bounds: b, tools, inputProblem: toolInputProblem });

describe('planTurn: an answer', () => {
  it('is the joined text of an answer without tool_use blocks', () => {
    expect(plan([text('Your order '), text('shipped.')])).toEqual({ kind: 'answer', text: 'Your order shipped.' });
    expect(plan([])).toEqual({ kind: 'answer', text: '' });
  });

  it('is kept whatever the bounds say: it arrived, and a stop would throw it away', () => {
    expect(plan([text('done')], tally({ turns: 4, tokens: 5_000, toolCalls: 9 }))).toEqual({ kind: 'answer', text: 'done' });
  });
});

describe('planTurn: the bounds stop a turn that asks for tools', () => {
  it('maxTurns: at the last turn, no turn is left to read the results', () => {
    const p = plan([use('t1', 'order-lookup'), use('t2', 'kb-search', { query: 'q' })], tally({ turns: 4 }));
    expect(p).toEqual({ kind: 'stop', reached: { bound: 'maxTurns', message: 'the model still asked for tools (order-lookup, kb-search) at turn 4, the last of 4' } });
    expect(plan([use('t1', 'order-lookup')], tally({ turns: 3 })).kind).toBe('call_tools');
  });

  it('maxTokens: once the turns used the allowance', () => {
    expect(plan([use('t1', 'order-lookup')], tally({ tokens: 1_000 }))).toEqual({ kind: 'stop', reached: { bound: 'maxTokens', message: "the model's turns used 1000 tokens, the bound is 1000" } });
    expect(plan([use('t1', 'order-lookup')], tally({ tokens: 999 })).kind).toBe('call_tools');
  });

  it('maxToolCalls: when the whole turn would take the run past it, even if some of its calls would fit', () => {
    const p = plan([use('t1', 'order-lookup'), use('t2', 'order-lookup')], tally({ toolCalls: 4 }));
    expect(p).toEqual({ kind: 'stop', reached: { bound: 'maxToolCalls', message: 'the model asked for 2 more tool calls (order-lookup, order-lookup) after 4, the bound is 5' } });
  });

  it('maxToolCalls: a turn that ends exactly at the bound is allowed', () => {
    const p = plan([use('t1', 'order-lookup'), use('t2', 'order-lookup')], tally({ toolCalls: 3 }));
    expect(p).toMatchObject({ kind: 'call_tools', calls: [{ id: 't1' }, { id: 't2' }], refused: [] });
  });

  it('maxToolCalls of 0 stops the first turn that asks for a tool', () => {
    expect(plan([use('t1', 'order-lookup')], tally(), { ...bounds, maxToolCalls: 0 })).toMatchObject({ kind: 'stop', reached: { bound: 'maxToolCalls' } });
  });

  it('checks maxTurns before maxTokens before maxToolCalls', () => {
    const all = tally({ turns: 4, tokens: 1_000, toolCalls: 5 });
    expect(plan([use('t1', 'order-lookup')], all)).toMatchObject({ reached: { bound: 'maxTurns' } });
    expect(plan([use('t1', 'order-lookup')], { ...all, turns: 1 })).toMatchObject({ reached: { bound: 'maxTokens' } });
  });
});

describe('planTurn: which asked-for tools are called', () => {
  it('calls an offered tool whose input passes its schema', () => {
    expect(plan([text('Let me look.'), use('t1', 'order-lookup', { orderId: 'A-1' })])).toEqual({ kind: 'call_tools', calls: [{ id: 't1', name: 'order-lookup', input: { orderId: 'A-1' } }], refused: [] });
  });

  it('refuses a tool that was not offered, listing the tools there are', () => {
    expect(plan([use('t1', 'delete-order')])).toEqual({
      kind: 'call_tools',
      calls: [],
      refused: [{ id: 't1', name: 'delete-order', error: 'there is no tool named "delete-order"; the tools are order-lookup, kb-search' }],
    });
  });

  it('cuts a long unknown tool name in the refusal', () => {
    const p = plan([use('t1', 'x'.repeat(1_000))]);
    expect(p.kind === 'call_tools' && p.refused[0]!.error).toBe(`there is no tool named "${'x'.repeat(128)}"; the tools are order-lookup, kb-search`);
  });

  it('refuses an input that was not a JSON object, with the reason the stream gave', () => {
    expect(plan([unreadable('t1', 'order-lookup', 'the input is not JSON: Unexpected end')])).toMatchObject({ refused: [{ id: 't1', error: 'the input is not a JSON object (the input is not JSON: Unexpected end)' }] });
    expect(plan([unreadable('t1', 'order-lookup')])).toMatchObject({ refused: [{ id: 't1', error: 'the input is not a JSON object (unreadable)' }] });
  });

  it('refuses an input its schema rejects, saying why as the model can act on it', () => {
    expect(plan([use('t1', 'order-lookup', { order: 'A-1' })])).toEqual({ kind: 'call_tools', calls: [], refused: [{ id: 't1', name: 'order-lookup', error: "input must have required property 'orderId'" }] });
  });

  it('keeps the order of the answer in a turn of calls and refusals', () => {
    const p = plan([use('a', 'kb-search', { query: 'late' }), use('b', 'nope'), use('c', 'order-lookup', { orderId: 'A-2' }), use('d', 'order-lookup', {})]);
    expect(p).toMatchObject({ kind: 'call_tools', calls: [{ id: 'a' }, { id: 'c' }], refused: [{ id: 'b' }, { id: 'd' }] });
  });

  it('counts refused calls toward maxToolCalls like made ones', () => {
    expect(plan([use('t1', 'nope'), use('t2', 'nope')], tally({ toolCalls: 4 }))).toMatchObject({ kind: 'stop', reached: { bound: 'maxToolCalls' } });
  });
});

describe('planTurn: an answer that breaks the Messages API\'s rules', () => {
  it.each([
    ['an empty id', ''],
    ['a character outside letters, digits, _ and -', 'toolu 01'],
    ['a 129-character id', 'a'.repeat(129)],
  ])('is invalid with %s', (_, id) => {
    expect(plan([use(id, 'order-lookup')])).toMatchObject({ kind: 'invalid', message: expect.stringContaining('a tool_use id is not 1 to 128 letters') });
  });

  it('allows an id of 128 characters', () => {
    expect(plan([use('a'.repeat(128), 'order-lookup')]).kind).toBe('call_tools');
  });

  it('is invalid when an id appears twice', () => {
    expect(plan([use('toolu_1', 'order-lookup'), use('toolu_1', 'kb-search', { query: 'q' })])).toEqual({ kind: 'invalid', message: 'the tool_use id toolu_1 appears twice in one answer' });
  });

  it('cuts a long bad id in the message', () => {
    const p = plan([use('!'.repeat(1_000), 'order-lookup')]);
    expect(p.kind === 'invalid' && p.message.length).toBeLessThan(250);
  });

  it('is invalid whatever the bounds: the provider broke the protocol, the model did not run out', () => {
    expect(plan([use('bad id', 'order-lookup')], tally({ turns: 4, tokens: 5_000 })).kind).toBe('invalid');
  });
});

describe('boundBeforeTurn', () => {
  const now = 1_000_000;

  it('lets a turn start within every bound', () => {
    expect(boundBeforeTurn(tally({ turns: 3, tokens: 999 }), bounds, now, now + 1)).toBeUndefined();
    expect(boundBeforeTurn({ turns: 0, toolCalls: 0, tokens: 0 }, bounds, now, now + 1)).toBeUndefined();
  });

  it('stops after maxTurns turns', () => {
    expect(boundBeforeTurn(tally({ turns: 4 }), bounds, now, now + 1)).toEqual({ bound: 'maxTurns', message: 'the model did not answer within 4 turns' });
  });

  it('stops with the token allowance spent', () => {
    expect(boundBeforeTurn(tally({ tokens: 1_200 }), bounds, now, now + 1)).toEqual({ bound: 'maxTokens', message: "the model's turns used 1200 tokens, the bound is 1000" });
  });

  it('stops at the step\'s deadline when its share is under 1', () => {
    const share = { ...bounds, deadlineShare: 0.5 };
    expect(boundBeforeTurn(tally(), share, now, now)).toEqual({ bound: 'deadlineShare', message: 'the agent used its share (0.5) of the time the run had left' });
    expect(boundBeforeTurn(tally(), share, now + 1, now)).toMatchObject({ bound: 'deadlineShare' });
    expect(boundBeforeTurn(tally(), share, now - 1, now)).toBeUndefined();
  });

  it('leaves the run\'s deadline to the step loop with a share of 1', () => {
    expect(boundBeforeTurn(tally(), bounds, now + 10_000, now)).toBeUndefined();
  });
});

describe('agentStepDeadline', () => {
  const start = 1_000_000;

  it('is the run\'s deadline with a share of 1', () => {
    expect(agentStepDeadline(start + 30_000, start, 1)).toBe(start + 30_000);
    expect(agentStepDeadline(start - 5, start, 1)).toBe(start - 5);
  });

  it('is the share of the time left when the step started, in whole milliseconds', () => {
    expect(agentStepDeadline(start + 30_000, start, 0.5)).toBe(start + 15_000);
    expect(agentStepDeadline(start + 10, start, 1 / 3)).toBe(start + 3);
  });

  it('is the step\'s start when the run\'s deadline has passed', () => {
    expect(agentStepDeadline(start - 5_000, start, 0.5)).toBe(start);
  });
});

describe('turnProgress', () => {
  const where = 'step 1/1 (agent)';

  it('says the model is asked when no tool is called', () => {
    expect(turnProgress(where, 1, [])).toBe('running: step 1/1 (agent) turn 1, asking the model');
  });

  it('names one tool', () => {
    expect(turnProgress(where, 2, [{ name: 'order-lookup' }])).toBe('running: step 1/1 (agent) turn 2, calling order-lookup');
  });

  it('names two tools called in parallel', () => {
    expect(turnProgress(where, 1, [{ name: 'order-lookup' }, { name: 'kb-search' }])).toBe('running: step 1/1 (agent) turn 1, calling order-lookup and kb-search in parallel');
  });

  it('lists three tools', () => {
    expect(turnProgress(where, 3, [{ name: 'a' }, { name: 'b' }, { name: 'c' }])).toBe('running: step 1/1 (agent) turn 3, calling a, b and c in parallel');
  });
});
