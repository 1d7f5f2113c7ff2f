import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import type { AgentStepConfig } from '../../../src/config/schema.js';
import type { RunRequested } from '../../../src/events/schemas.js';
import { AgentLoop, toolCallId, toolResultKey, turnKey, type AgentStepRun } from '../../../src/execution/agent-loop.js';
import { DependencyUnavailable } from '../../../src/execution/call-guard.js';
import { OutputBoundExceeded, jsonBytes, type OutputLimits } from '../../../src/execution/output-bounds.js';
import type { DependencyCall, LlmCallOutput } from '../../../src/execution/step-caller.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import type { CancelReason } from '../../../src/runs/cancellation.js';
import { stepSequence } from '../../../src/runs/status-sequence.js';
import type { LlmContentBlock, LlmMessage } from '../../../src/steps/llm-call.js';
import { StepError } from '../../../src/steps/step-error.js';
import { metricValue } from '../../support/metric-value.js';
import { NOW, RUN } from './fixtures.js';

const run: RunRequested = { ...RUN, workflow: 'support-agent' };

const step = (bounds: Partial<AgentStepConfig['bounds']> = {}): AgentStepConfig => ({
  id: 'agent',
  kind: 'agent',
  dependency: 'anthropic',
  system: 'You answer support messages.',
  tools: ['order-lookup', 'kb-search'],
  bounds: { maxTurns: 6, maxToolCalls: 12, maxTokens: 40_000, maxParallelTools: 4, deadlineShare: 1, ...bounds },
});

const text = (t: string): LlmContentBlock => ({ type: 'text', text: t });
const lookup = (id: string, orderId = 'A-1'): LlmContentBlock => ({ type: 'tool_use', id, name: 'order-lookup', input: { orderId } });
const search = (id: string, query = 'late delivery'): LlmContentBlock => ({ type: 'tool_use', id, name: 'kb-search', input: { query } });

/** A model turn as StepCaller.callDependency answers it when tools are offered. */
const turn = (content: LlmContentBlock[], tokens: [number, number] = [10, 5]): LlmCallOutput => ({
  text: content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join(''),
  model: 'sim',
  usage: { inputTokens: tokens[0], outputTokens: tokens[1], cacheCreationInputTokens: 0, cacheReadInputTokens: 0 },
  content,
  stopReason: content.some((b) => b.type === 'tool_use') ? 'tool_use' : 'end_turn',
});

type ToolAnswer = (call: Extract<DependencyCall, { kind: 'tool' }>) => Promise<unknown>;
const after = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** A tool that answers after `ms`, echoing its input. */
const answers =
  (ms = 5): ToolAnswer =>
  async (call) => (await after(ms), { answered: call.callId, body: call.body });

/**
 * An agent loop over fakes: the model's turns are played in order (a function is called with the
 * messages sent), tool calls are answered by `tool`, journal entries land in `journal`, and the
 * journal answers a cancellation for the keys in `cancelAt`.
 */
function agent(opts: { turns: (LlmCallOutput | ((messages: LlmMessage[]) => LlmCallOutput | Promise<LlmCallOutput>))[]; tool?: ToolAnswer; cancelAt?: Map<string, CancelReason>; now?: () => number; limits?: Partial<OutputLimits> }) {
  const config = loadConfig({ env: {} });
  Object.assign(config.processor, opts.limits);
  const metrics = createMetrics();
  const calls: DependencyCall[] = [];
  const callRuns: RunRequested[] = [];
  /** Each model turn's messages as sent (the loop goes on appending to the array it passes). */
  const sent: LlmMessage[][] = [];
  const journal = new Map<string, unknown>();
  const events: { sequence: number; message: string; step: string }[] = [];
  let running = 0;
  let peak = 0;
  const turns = [...opts.turns];
  const tool = opts.tool ?? answers();
  const loop = new AgentLoop({
    config,
    metrics,
    now: opts.now ?? (() => NOW),
    caller: {
      callDependency: async (r, call) => {
        calls.push(call);
        callRuns.push(r);
        if (call.kind === 'llm') {
          sent.push(structuredClone(call.messages));
          const next = turns.shift();
          if (!next) throw new Error('the test scripted no more model turns');
          return typeof next === 'function' ? next(call.messages) : next;
        }
        running++;
        peak = Math.max(peak, running);
        try {
          return await tool(call);
        } finally {
          running--;
        }
      },
    },
    progress: {
      record: async (_runId, key, output) => {
        journal.set(key, structuredClone(output));
        return opts.cancelAt?.get(key);
      },
    },
    outcomes: { running: (_run, e) => void events.push(e) },
  });
  const stepRun = (over: Partial<AgentStepRun> = {}): AgentStepRun => ({
    run,
    step: step(),
    stepIndex: 0,
    slots: 100,
    where: 'step 1/1 (agent)',
    input: { message: 'Where is my order A-1?' },
    outputs: {},
    done: new Map(),
    keptBytes: 0,
    fallback: 'degrade',
    ...over,
  });
  return {
    loop,
    metrics,
    calls,
    callRuns,
    sent,
    journal,
    events,
    peak: () => peak,
    toolCalls: () => calls.filter((c) => c.kind === 'tool'),
    modelCalls: () => calls.filter((c) => c.kind === 'llm'),
    stepRun,
  };
}

const threeTurns = () => [turn([text('Let me check.'), lookup('t1a'), search('t1b')]), turn([lookup('t2a', 'A-2'), search('t2b', 'refund')]), turn([text('It ships tomorrow.')])];

describe('AgentLoop answering', () => {
  it('runs a 3-turn agent with 2 tool calls a turn to its answer, and summarises what it did', async () => {
    const a = agent({ turns: threeTurns() });
    const end = await a.loop.run(a.stepRun());
    expect(end.kind).toBe('answered');
    if (end.kind !== 'answered') return;
    expect(end.output.text).toBe('It ships tomorrow.');
    expect(end.output.agent).toMatchObject({ turns: 3, toolCalls: 4, toolErrors: 0, tokens: 45, unavailable: [] });
    expect(end.output.agent.stoppedBy).toBeUndefined();
    expect(end.output.agent.calls).toEqual(Array.from({ length: 3 }, () => ({ model: 'sim', usage: { inputTokens: 10, outputTokens: 5, cacheCreationInputTokens: 0, cacheReadInputTokens: 0 } })));
    expect(end.output.agent.transcript).toEqual([
      { turn: 1, text: 'Let me check.', tools: [{ id: 't1a', name: 'order-lookup', isError: false }, { id: 't1b', name: 'kb-search', isError: false }] },
      { turn: 2, text: '', tools: [{ id: 't2a', name: 'order-lookup', isError: false }, { id: 't2b', name: 'kb-search', isError: false }] },
      { turn: 3, text: 'It ships tomorrow.', tools: [] },
    ]);
    expect(a.modelCalls()).toHaveLength(3);
    expect(a.toolCalls()).toHaveLength(4);
    expect(await metricValue(a.metrics.agentTurns, { workflow: 'support-agent' })).toBe(3);
    expect(await metricValue(a.metrics.agentToolCalls, { dependency: 'order-lookup', outcome: 'ok' })).toBe(2);
  });

  it('runs a turn\'s tool calls at once', async () => {
    const a = agent({ turns: threeTurns() });
    await a.loop.run(a.stepRun());
    expect(a.peak()).toBe(2);
  });

  it('runs them one at a time with maxParallelTools 1', async () => {
    const a = agent({ turns: threeTurns() });
    const end = await a.loop.run(a.stepRun({ step: step({ maxParallelTools: 1 }) }));
    expect(end.kind).toBe('answered');
    expect(a.peak()).toBe(1);
    expect(a.toolCalls()).toHaveLength(4);
  });

  it('sends the model its tools, and each turn the conversation so far', async () => {
    const a = agent({ turns: threeTurns() });
    await a.loop.run(a.stepRun());
    const first = a.modelCalls()[0]!;
    expect(first).toMatchObject({ kind: 'llm', dependency: 'anthropic', callId: 'agent:turn-1', system: 'You answer support messages.' });
    expect(first.kind === 'llm' && first.tools!.map((t) => t.name)).toEqual(['order-lookup', 'kb-search']);
    expect(first.kind === 'llm' && first.tools![0]).toMatchObject({ description: expect.stringContaining('Looks up an order'), inputSchema: { type: 'object', required: ['orderId'] } });
    expect(a.sent[0]).toHaveLength(1);
    expect(a.sent[0]![0]!.role).toBe('user');
    expect(a.modelCalls().map((c) => c.callId)).toEqual(['agent:turn-1', 'agent:turn-2', 'agent:turn-3']);
    expect(a.sent.map((m) => m.length)).toEqual([1, 3, 5]);
  });

  it('sends back the assistant\'s tool_use blocks, then their results in tool_use order (not the order they finished), failures marked is_error', async () => {
    // The first call is the slower one, and the second fails.
    const tool: ToolAnswer = async (call) => {
      if (call.dependency === 'order-lookup') return (await after(15), { status: 'shipped' });
      await after(1);
      throw new StepError('http_status', 'kb-search', 'kb-search: HTTP 500', false, 500);
    };
    const a = agent({ turns: [turn([text('Let me check.'), lookup('t1a'), search('t1b')]), turn([text('Shipped; no articles.')])], tool });
    const end = await a.loop.run(a.stepRun());
    expect(end.kind).toBe('answered');
    expect(a.sent[1]).toEqual([
      a.sent[0]![0],
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Let me check.' },
          { type: 'tool_use', id: 't1a', name: 'order-lookup', input: { orderId: 'A-1' } },
          { type: 'tool_use', id: 't1b', name: 'kb-search', input: { query: 'late delivery' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 't1a', content: '{"status":"shipped"}' },
          { type: 'tool_result', tool_use_id: 't1b', content: 'the kb-search tool failed: kb-search: HTTP 500', is_error: true },
        ],
      },
    ]);
    if (end.kind !== 'answered') return;
    expect(end.output.agent).toMatchObject({ toolErrors: 1, toolCalls: 2 });
    expect(end.output.agent.transcript[0]!.tools).toEqual([{ id: 't1a', name: 'order-lookup', isError: false }, { id: 't1b', name: 'kb-search', isError: true }]);
    expect(await metricValue(a.metrics.agentToolCalls, { dependency: 'kb-search', outcome: 'error' })).toBe(1);
  });

  it('calls each tool with its input, under the callId stepId:turn-<n>:toolUseId (the Idempotency-Key is runId:callId)', async () => {
    const a = agent({ turns: threeTurns() });
    await a.loop.run(a.stepRun());
    expect(a.toolCalls()).toEqual([
      { kind: 'tool', dependency: 'order-lookup', callId: 'agent:turn-1:t1a', body: { input: { orderId: 'A-1' } } },
      { kind: 'tool', dependency: 'kb-search', callId: 'agent:turn-1:t1b', body: { input: { query: 'late delivery' } } },
      { kind: 'tool', dependency: 'order-lookup', callId: 'agent:turn-2:t2a', body: { input: { orderId: 'A-2' } } },
      { kind: 'tool', dependency: 'kb-search', callId: 'agent:turn-2:t2b', body: { input: { query: 'refund' } } },
    ]);
  });

  it('gives a tool_use id the model uses again in a later turn another callId: a new call, not the first one\'s answer', async () => {
    const a = agent({ turns: [turn([lookup('toolu_0')]), turn([lookup('toolu_0', 'A-2')]), turn([text('done')])] });
    await a.loop.run(a.stepRun());
    expect(a.toolCalls().map((c) => [c.callId, c.body])).toEqual([
      ['agent:turn-1:toolu_0', { input: { orderId: 'A-1' } }],
      ['agent:turn-2:toolu_0', { input: { orderId: 'A-2' } }],
    ]);
  });

  it('journals each turn and each tool result under its own key before going on', async () => {
    const a = agent({ turns: threeTurns() });
    await a.loop.run(a.stepRun());
    expect([...a.journal.keys()].sort()).toEqual(
      [turnKey('agent', 1), toolResultKey('agent', 1, 't1a'), toolResultKey('agent', 1, 't1b'), turnKey('agent', 2), toolResultKey('agent', 2, 't2a'), toolResultKey('agent', 2, 't2b'), turnKey('agent', 3)].sort(),
    );
    expect(a.journal.get(toolResultKey('agent', 1, 't1a'))).toEqual({ content: JSON.stringify({ answered: 'agent:turn-1:t1a', body: { input: { orderId: 'A-1' } } }), isError: false });
    // A turn is journaled without the call's `text`, which its text blocks already hold.
    expect(a.journal.get(turnKey('agent', 3))).toEqual({ model: 'sim', usage: turn([]).usage, content: [text('It ships tomorrow.')], stopReason: 'end_turn' });
  });

  it('does not send back an empty text block, which the API refuses', async () => {
    const a = agent({ turns: [turn([text(''), lookup('t1')]), turn([text('done')])] });
    await a.loop.run(a.stepRun());
    expect(a.sent[1]![1]).toEqual({ role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'order-lookup', input: { orderId: 'A-1' } }] });
  });

  it('turns a tool result over processor.maxStepOutputBytes into an is_error result', async () => {
    const a = agent({ turns: [turn([lookup('t1')]), turn([text('done')])], tool: async () => ({ blob: 'x'.repeat(300_000) }) });
    await a.loop.run(a.stepRun());
    const result = a.sent[1]![2]!.content as { content: string; is_error?: boolean }[];
    expect(result[0]).toMatchObject({ is_error: true, content: expect.stringMatching(/^the order-lookup result is \d+ bytes, over the bound of \d+$/) });
  });
});

describe('AgentLoop resuming a redelivered run', () => {
  it('does not call a journaled turn nor a journaled tool result again, only what is missing', async () => {
    const done = new Map<string, unknown>([
      [turnKey('agent', 1), turn([text('Let me check.'), lookup('t1a'), search('t1b')])],
      [toolResultKey('agent', 1, 't1a'), { content: '{"status":"shipped"}', isError: false }],
    ]);
    const a = agent({ turns: [turn([text('It shipped.')])] });
    const end = await a.loop.run(a.stepRun({ done }));
    expect(end).toMatchObject({ kind: 'answered', output: { text: 'It shipped.', agent: { turns: 2, toolCalls: 2, tokens: 30 } } });
    expect(a.modelCalls().map((c) => c.callId)).toEqual(['agent:turn-2']);
    expect(a.toolCalls().map((c) => c.callId)).toEqual(['agent:turn-1:t1b']);
    // The journaled result goes to the model as if it had just been made.
    expect((a.sent[0]![2]!.content as { tool_use_id: string; content: string }[]).map((b) => [b.tool_use_id, b.content])).toEqual([
      ['t1a', '{"status":"shipped"}'],
      ['t1b', JSON.stringify({ answered: 'agent:turn-1:t1b', body: { input: { query: 'late delivery' } } })],
    ]);
    // A journaled turn is counted once, when it was answered.
    expect(await metricValue(a.metrics.agentTurns, { workflow: 'support-agent' })).toBe(1);
    expect(a.journal.has(turnKey('agent', 1))).toBe(false);
  });
});

describe('AgentLoop bounds what it journals as step outputs are bounded', () => {
  /** The bound an entry passed, as the loop throws it. */
  const passed = (promise: Promise<unknown>) => promise.then(() => expect.fail('the loop ended without passing a bound'), (err: unknown) => (expect(err).toBeInstanceOf(OutputBoundExceeded), (err as OutputBoundExceeded).verdict));
  /** A turn as the journal holds it: the call's output without its text. */
  const journaledAs = ({ text: _, ...rest }: LlmCallOutput) => rest;

  it('fails a model turn over processor.maxStepOutputBytes, and journals nothing of it', async () => {
    const big = turn([text('x'.repeat(5_000)), lookup('t1')]);
    const a = agent({ turns: [big], limits: { maxStepOutputBytes: 4_096 } });
    const verdict = await passed(a.loop.run(a.stepRun()));
    expect(verdict).toEqual({ ok: false, code: 'output_too_large', message: `turn 1's answer is ${jsonBytes(journaledAs(big))} bytes, over the bound of 4096 (processor.maxStepOutputBytes)` });
    expect(a.journal.size).toBe(0);
    expect(a.toolCalls()).toHaveLength(0);
  });

  it('counts the text once: a turn is measured as journaled', async () => {
    const at = turn([text('x'.repeat(3_000))]);
    const a = agent({ turns: [at], limits: { maxStepOutputBytes: jsonBytes(journaledAs(at)) } });
    expect(await a.loop.run(a.stepRun())).toMatchObject({ kind: 'answered', output: { text: 'x'.repeat(3_000) } });
  });

  it('fails once the turns and tool results, with the outputs before the step, pass processor.maxResultBytes, before the entry that passes it is journaled', async () => {
    const turns = [turn([lookup('t1')]), turn([lookup('t2', 'A-2')]), turn([text('done')])];
    const tool: ToolAnswer = async () => ({ blob: 'y'.repeat(1_500) });
    // Room for turn 1 and its result after 1,000 bytes of earlier outputs, not for turn 2's result too.
    const first = agent({ turns: structuredClone(turns), tool });
    await first.loop.run(first.stepRun());
    const [turn1, result1, turn2, result2] = [turnKey('agent', 1), toolResultKey('agent', 1, 't1'), turnKey('agent', 2), toolResultKey('agent', 2, 't2')].map((k) => jsonBytes(first.journal.get(k)));
    const maxResultBytes = 1_000 + turn1! + result1! + turn2! + result2! - 1;

    const a = agent({ turns, tool, limits: { maxResultBytes } });
    const verdict = await passed(a.loop.run(a.stepRun({ keptBytes: 1_000 })));
    expect(verdict).toEqual({ ok: false, code: 'result_too_large', message: `the agent's turns and tool results so far, with the outputs before the step, are ${maxResultBytes + 1} bytes, over the bound of ${maxResultBytes} (processor.maxResultBytes)` });
    expect([...a.journal.keys()]).toEqual([turnKey('agent', 1), toolResultKey('agent', 1, 't1'), turnKey('agent', 2)]);
    expect(a.modelCalls()).toHaveLength(2);
  });

  it('counts journaled entries too, and fails one over a bound lowered since it was journaled', async () => {
    const done = new Map<string, unknown>([[turnKey('agent', 1), turn([text('y'.repeat(5_000)), lookup('t1')])]]);
    const a = agent({ turns: [], limits: { maxStepOutputBytes: 4_096 } });
    expect(await passed(a.loop.run(a.stepRun({ done })))).toMatchObject({ code: 'output_too_large', message: expect.stringMatching(/^turn 1's answer is \d+ bytes/) });
    expect(a.calls).toHaveLength(0);
  });
});

describe('AgentLoop idempotency keys across deliveries', () => {
  it('repeats a call cut off by a crash under the callId it was first made with, in a later turn that reuses the id', async () => {
    const turns = () => [turn([lookup('toolu_0')]), turn([lookup('toolu_0', 'A-2')]), turn([text('done')])];
    const first = agent({ turns: turns(), cancelAt: new Map([[toolResultKey('agent', 2, 'toolu_0'), 'requested' as CancelReason]]) });
    expect(await first.loop.run(first.stepRun())).toMatchObject({ kind: 'cancelled' });
    // The next delivery finds turns 1 and 2 and turn 1's result journaled: turn 2's call was in flight.
    const done = new Map([...first.journal].filter(([k]) => k !== toolResultKey('agent', 2, 'toolu_0')));
    const again = agent({ turns: turns().slice(2) });
    await again.loop.run(again.stepRun({ done }));
    expect(again.toolCalls().map((c) => c.callId)).toEqual([first.toolCalls()[1]!.callId]);
    expect(again.toolCalls()[0]!.callId).toBe(toolCallId('agent', 2, 'toolu_0'));
  });
});

describe('AgentLoop when a tool is unavailable', () => {
  const unavailable = (call: Extract<DependencyCall, { kind: 'tool' }>) => new DependencyUnavailable(call.dependency, NOW + 60_000, false);

  it('degrade, resumed: a journaled unavailable result still lists the tool, so the answer stays marked degraded', async () => {
    const first = agent({ turns: [turn([search('t1')]), turn([text('unused')])], tool: async (call) => { throw unavailable(call); }, cancelAt: new Map([[turnKey('agent', 2), 'requested' as CancelReason]]) });
    expect(await first.loop.run(first.stepRun())).toMatchObject({ kind: 'cancelled' });
    // The next delivery finds turn 1 and its tool result journaled, as after a crash before turn 2 was.
    const done = new Map([...first.journal].filter(([k]) => k !== turnKey('agent', 2)));
    const again = agent({ turns: [turn([text('The knowledge base is unavailable.')])] });
    const end = await again.loop.run(again.stepRun({ done }));
    expect(again.toolCalls()).toHaveLength(0);
    expect(end).toMatchObject({ kind: 'answered', output: { agent: { unavailable: [{ dependency: 'kb-search', reason: expect.stringContaining('breaker open') }] } } });
  });

  it('degrade: the model reads an is_error result, and the tool is listed as unavailable', async () => {
    const tool: ToolAnswer = async (call) => {
      if (call.dependency === 'kb-search') throw unavailable(call);
      return { status: 'shipped' };
    };
    const a = agent({ turns: [turn([lookup('t1a'), search('t1b')]), turn([text('Shipped; the knowledge base is unavailable.')])], tool });
    const end = await a.loop.run(a.stepRun());
    expect(end.kind).toBe('answered');
    if (end.kind !== 'answered') return;
    expect(end.output.agent.unavailable).toEqual([{ dependency: 'kb-search', reason: expect.stringContaining('kb-search is unavailable (breaker open)') }]);
    const results = a.sent[1]![2]!.content as { tool_use_id: string; content: string; is_error?: boolean }[];
    expect(results[1]).toMatchObject({ tool_use_id: 't1b', is_error: true, content: expect.stringMatching(/^the kb-search tool is unavailable right now \(.*\); do not guess what it would have said$/) });
    expect(end.output.agent.toolErrors).toBe(1);
  });

  it('fail: rejects with DependencyUnavailable once the turn\'s other calls settled and were journaled', async () => {
    const tool: ToolAnswer = async (call) => {
      if (call.dependency === 'kb-search') throw unavailable(call);
      return (await after(15), { status: 'shipped' });
    };
    const a = agent({ turns: [turn([search('t1a'), lookup('t1b')])], tool });
    await expect(a.loop.run(a.stepRun({ fallback: 'fail' }))).rejects.toBeInstanceOf(DependencyUnavailable);
    expect(a.journal.get(toolResultKey('agent', 1, 't1b'))).toEqual({ content: '{"status":"shipped"}', isError: false });
    expect(a.journal.has(toolResultKey('agent', 1, 't1a'))).toBe(false);
  });

  it('lets any other error escape: it is the infrastructure\'s, not the model\'s to read', async () => {
    const a = agent({ turns: [turn([lookup('t1')])], tool: async () => { throw new TypeError('bug'); } });
    await expect(a.loop.run(a.stepRun())).rejects.toThrow(TypeError);
  });
});

describe('AgentLoop bounds', () => {
  /** A model that asks for a lookup every turn, with `tokens` each. */
  const insistent = (n: number, tokens: [number, number] = [10, 5]) => Array.from({ length: n }, (_, i) => turn([text(`turn ${i + 1}`), lookup(`t${i + 1}`)], tokens));

  it('maxTurns stops a model that always asks for tools, with the transcript so far', async () => {
    const a = agent({ turns: insistent(10) });
    const end = await a.loop.run(a.stepRun({ step: step({ maxTurns: 3 }) }));
    expect(end).toMatchObject({ kind: 'stopped', reached: { bound: 'maxTurns' }, output: { text: null, agent: { stoppedBy: 'maxTurns', turns: 3, toolCalls: 2 } } });
    if (end.kind !== 'stopped') return;
    expect(end.output.agent.transcript.map((t) => t.text)).toEqual(['turn 1', 'turn 2', 'turn 3']);
    expect(end.output.agent.calls).toHaveLength(3);
    expect(a.modelCalls()).toHaveLength(3);
    expect(a.toolCalls()).toHaveLength(2);
    expect(await metricValue(a.metrics.agentStops, { bound: 'maxTurns' })).toBe(1);
  });

  it('maxTokens stops it once its turns used the allowance', async () => {
    const a = agent({ turns: insistent(10, [60, 40]) });
    const end = await a.loop.run(a.stepRun({ step: step({ maxTokens: 150 }) }));
    expect(end).toMatchObject({ kind: 'stopped', reached: { bound: 'maxTokens' }, output: { agent: { stoppedBy: 'maxTokens', turns: 2, tokens: 200, toolCalls: 1 } } });
    expect(a.toolCalls()).toHaveLength(1);
  });

  it('maxToolCalls stops it before a turn whose calls would pass the bound', async () => {
    const twoATurn = Array.from({ length: 5 }, (_, i) => turn([lookup(`a${i}`), search(`b${i}`)]));
    const a = agent({ turns: twoATurn });
    const end = await a.loop.run(a.stepRun({ step: step({ maxToolCalls: 3 }) }));
    expect(end).toMatchObject({ kind: 'stopped', reached: { bound: 'maxToolCalls' }, output: { agent: { stoppedBy: 'maxToolCalls', turns: 2, toolCalls: 2 } } });
    expect(a.toolCalls()).toHaveLength(2);
  });

  it('counts an unknown tool and an input its schema refuses toward maxToolCalls, without calling anyone', async () => {
    const wrong: LlmContentBlock[] = [
      { type: 'tool_use', id: 't1', name: 'delete-order', input: { orderId: 'A-1' } },
      { type: 'tool_use', id: 't2', name: 'order-lookup', input: undefined, inputError: 'the input is not JSON: Unexpected end' },
      { type: 'tool_use', id: 't3', name: 'kb-search', input: { q: 'x' } },
    ];
    const a = agent({ turns: [turn(wrong), turn([lookup('t4')])] });
    const end = await a.loop.run(a.stepRun({ step: step({ maxToolCalls: 3 }) }));
    expect(end).toMatchObject({ kind: 'stopped', reached: { bound: 'maxToolCalls' }, output: { agent: { toolCalls: 3, toolErrors: 3 } } });
    expect(a.toolCalls()).toHaveLength(0);
    // An input that did not parse goes back as {} (the API needs an object), and each refusal says why.
    expect(a.sent[1]![1]!.content).toContainEqual({ type: 'tool_use', id: 't2', name: 'order-lookup', input: {} });
    expect(a.sent[1]![2]!.content).toEqual([
      { type: 'tool_result', tool_use_id: 't1', content: 'there is no tool named "delete-order"; the tools are order-lookup, kb-search', is_error: true },
      { type: 'tool_result', tool_use_id: 't2', content: 'the input is not a JSON object (the input is not JSON: Unexpected end)', is_error: true },
      { type: 'tool_result', tool_use_id: 't3', content: "input must have required property 'query'", is_error: true },
    ]);
  });

  it('deadlineShare: stops before a turn once the step used its share of the time left, and clamps each call to it', async () => {
    let clock = NOW;
    const a = agent({ turns: insistent(5), now: () => clock, tool: async () => ((clock = NOW + 15_000), { ok: true }) });
    const end = await a.loop.run(a.stepRun({ step: step({ deadlineShare: 0.5 }) }));
    expect(end).toMatchObject({ kind: 'stopped', reached: { bound: 'deadlineShare' }, output: { agent: { stoppedBy: 'deadlineShare', turns: 1 } } });
    expect(a.callRuns.map((r) => r.deadline)).toEqual([NOW + 15_000, NOW + 15_000]);
  });

  it('deadlineShare: a model turn cut short by the step\'s deadline is the bound, not a failure', async () => {
    let clock = NOW;
    const late = async (): Promise<LlmCallOutput> => {
      clock = NOW + 15_000;
      throw new StepError('total_timeout', 'anthropic', 'anthropic: no complete answer in time', true);
    };
    const a = agent({ turns: [late], now: () => clock });
    const end = await a.loop.run(a.stepRun({ step: step({ deadlineShare: 0.5 }) }));
    expect(end).toMatchObject({ kind: 'stopped', reached: { bound: 'deadlineShare' }, output: { agent: { turns: 0 } } });
  });

  it('a model turn that fails within the step\'s time throws, as an LLM step\'s call does', async () => {
    const failing = async (): Promise<LlmCallOutput> => {
      throw new StepError('http_status', 'anthropic', 'anthropic: HTTP 400', false, 400);
    };
    const a = agent({ turns: [failing] });
    await expect(a.loop.run(a.stepRun({ step: step({ deadlineShare: 0.5 }) }))).rejects.toMatchObject({ kind: 'http_status' });
  });
});

describe('AgentLoop cancellation and protocol faults', () => {
  it('ends with `cancelled` when the journal answers a cancellation as a turn is recorded', async () => {
    const a = agent({ turns: threeTurns(), cancelAt: new Map([[turnKey('agent', 2), 'requested' as CancelReason]]) });
    expect(await a.loop.run(a.stepRun())).toEqual({ kind: 'cancelled', reason: 'requested' });
    expect(a.modelCalls()).toHaveLength(2);
    expect(a.toolCalls()).toHaveLength(2);
  });

  it('ends with `cancelled` when a cancellation is read as a tool result is recorded, after the turn\'s calls settle and before the model is asked again', async () => {
    const a = agent({ turns: threeTurns(), cancelAt: new Map([[toolResultKey('agent', 1, 't1b'), 'requested' as CancelReason]]) });
    expect(await a.loop.run(a.stepRun())).toEqual({ kind: 'cancelled', reason: 'requested' });
    expect(a.modelCalls()).toHaveLength(1);
    expect(a.toolCalls()).toHaveLength(2);
    expect(a.journal.has(toolResultKey('agent', 1, 't1a'))).toBe(true);
  });

  it('reports a cancellation rather than the failure of a fail tenant\'s unavailable tool in the same turn', async () => {
    const a = agent({ turns: threeTurns(), tool: async (call) => (call.callId.endsWith('t1a') ? { ok: true } : Promise.reject(new DependencyUnavailable(call.dependency, NOW + 60_000, false))), cancelAt: new Map([[toolResultKey('agent', 1, 't1a'), 'requested' as CancelReason]]) });
    expect(await a.loop.run({ ...a.stepRun(), fallback: 'fail' })).toEqual({ kind: 'cancelled', reason: 'requested' });
  });

  it('fails the step with a non-retryable bad_response when a tool_use id breaks the API\'s rules', async () => {
    const a = agent({ turns: [turn([lookup('toolu 1')])] });
    const err = await a.loop.run(a.stepRun()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StepError);
    expect(err).toMatchObject({ kind: 'bad_response', dependency: 'anthropic', retryable: false });
    expect(a.toolCalls()).toHaveLength(0);
  });
});

describe('AgentLoop progress events', () => {
  it('numbers each turn\'s events in the step\'s block: asking the model, then calling its tools', async () => {
    const tool: ToolAnswer = async (call) => {
      if (call.dependency === 'kb-search') throw new StepError('http_status', 'kb-search', 'kb-search: HTTP 500', false, 500);
      return {};
    };
    const a = agent({ turns: threeTurns(), tool });
    await a.loop.run(a.stepRun({ stepIndex: 1, slots: 10, where: 'step 2/2 (agent)' }));
    const seq = (progress: number) => stepSequence(run.attempt, 1, { progress, slots: 10 });
    expect(a.events).toEqual([
      { sequence: seq(0), step: 'agent', message: 'running: step 2/2 (agent) turn 1, asking the model' },
      { sequence: seq(1), step: 'agent', message: 'running: step 2/2 (agent) turn 1, calling order-lookup and kb-search in parallel' },
      { sequence: seq(2), step: 'agent', message: 'running: step 2/2 (agent) turn 2, asking the model with 2 tool results (1 failed)' },
      { sequence: seq(3), step: 'agent', message: 'running: step 2/2 (agent) turn 2, calling order-lookup and kb-search in parallel' },
      { sequence: seq(4), step: 'agent', message: 'running: step 2/2 (agent) turn 3, asking the model with 2 tool results (1 failed)' },
    ]);
  });

  it('emits nothing past the step\'s block of numbers (the sink would drop a reused one)', async () => {
    const a = agent({ turns: threeTurns() });
    const end = await a.loop.run(a.stepRun({ stepIndex: 2, slots: 3 }));
    expect(end.kind).toBe('answered');
    expect(a.events.map((e) => e.sequence)).toEqual([0, 1, 2].map((progress) => stepSequence(run.attempt, 2, { progress, slots: 3 })));
    expect(a.events.at(-1)!.message).toBe('running: step 1/1 (agent) turn 2, asking the model with 2 tool results');
  });

  it('with one slot, only the first turn is reported, at the step\'s own number', async () => {
    const a = agent({ turns: threeTurns() });
    await a.loop.run(a.stepRun({ stepIndex: 0, slots: 1 }));
    expect(a.events).toEqual([{ sequence: stepSequence(run.attempt, 0), step: 'agent', message: 'running: step 1/1 (agent) turn 1, asking the model' }]);
  });
});
