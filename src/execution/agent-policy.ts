import type { AgentStepConfig } from '../config/schema.js';
import type { LlmContentBlock } from '../steps/llm-call.js';

/**
 * The decisions of an agent's tool-use loop, as plain functions of what the model answered and
 * what the run has used: whether the loop answers, calls tools (and which it refuses with an
 * `is_error` result without calling them) or stops at a bound. The loop itself
 * (agent-loop.ts) only calls, journals and reports.
 */

export type AgentBounds = AgentStepConfig['bounds'];

/** Which bound ended an agent: the names are its config fields, so an operator finds the knob. */
export type AgentBound = 'maxTurns' | 'maxToolCalls' | 'maxTokens' | 'deadlineShare';

/** What one run's agent has used so far: model turns answered, tool calls asked for (refused ones too), and tokens of its turns. */
export interface AgentTally {
  turns: number;
  toolCalls: number;
  tokens: number;
}

export interface BoundReached {
  bound: AgentBound;
  message: string;
}

/** A tool call the loop makes: the model asked for an offered tool with an input its schema accepts. */
export interface ToolCallPlan {
  id: string;
  name: string;
  input: Record<string, unknown>;
}

/** A tool call answered with an `is_error` result without calling anyone, and why (as the model reads it). */
export interface RefusedToolCall {
  id: string;
  name: string;
  error: string;
}

export type TurnPlan =
  | { kind: 'answer'; text: string }
  | { kind: 'call_tools'; calls: ToolCallPlan[]; refused: RefusedToolCall[] }
  | { kind: 'stop'; reached: BoundReached }
  /** The answer breaks the Messages API's own rules (a tool_use id missing, malformed or repeated): the provider's fault, not the model's. */
  | { kind: 'invalid'; message: string };

/** The Messages API's tool_use ids; they also go into journal fields and idempotency keys, so their length is bounded. */
const TOOL_USE_ID = /^[A-Za-z0-9_-]{1,128}$/;

/** When the agent step must end: its share of the time the run had left when the step started. */
export function agentStepDeadline(runDeadline: number, stepStartedAt: number, share: number): number {
  if (share >= 1) return runDeadline;
  return stepStartedAt + Math.max(0, Math.floor((runDeadline - stepStartedAt) * share));
}

/**
 * A bound that forbids another model turn, checked before each: after as many turns as allowed,
 * with the token allowance spent, or past the step's share of the deadline (a share of 1 leaves
 * the run's deadline to the step loop, which reports it as expiry).
 */
export function boundBeforeTurn(tally: AgentTally, bounds: AgentBounds, now: number, stepDeadline: number): BoundReached | undefined {
  if (tally.turns >= bounds.maxTurns) return { bound: 'maxTurns', message: `the model did not answer within ${bounds.maxTurns} turns` };
  if (tally.tokens >= bounds.maxTokens) return { bound: 'maxTokens', message: `the model's turns used ${tally.tokens} tokens, the bound is ${bounds.maxTokens}` };
  if (bounds.deadlineShare < 1 && now >= stepDeadline) {
    return { bound: 'deadlineShare', message: `the agent used its share (${bounds.deadlineShare}) of the time the run had left` };
  }
  return undefined;
}

/**
 * What the loop does with a model's answer. `tally` already counts this turn and its tokens.
 * No tool_use block: the text is the answer (an answer that arrived is kept, whatever it cost).
 * Tool calls need another turn to be read, so they stop the loop when no turn or tokens are left,
 * or when they would take it past its tool-call bound. Otherwise each asked-for tool is called,
 * unless it was not offered or its input fails its schema: those get an `is_error` result the model
 * can correct, and still count as calls, so a model that keeps asking wrongly meets the bound.
 */
export function planTurn(opts: {
  content: readonly LlmContentBlock[];
  tally: AgentTally;
  bounds: AgentBounds;
  /** The offered tools by name, each with its input schema. */
  tools: ReadonlyMap<string, Record<string, unknown>>;
  /** Why an input fails a schema, or undefined when it passes. */
  inputProblem: (schema: Record<string, unknown>, input: unknown) => string | undefined;
}): TurnPlan {
  const { content, tally, bounds, tools } = opts;
  const uses = content.filter((b) => b.type === 'tool_use');
  if (uses.length === 0) return { kind: 'answer', text: answerText(content) };
  const ids = new Set<string>();
  for (const use of uses) {
    if (!TOOL_USE_ID.test(use.id)) return { kind: 'invalid', message: `a tool_use id is not 1 to 128 letters, digits, "_" or "-": ${JSON.stringify(use.id.slice(0, 140))}` };
    if (ids.has(use.id)) return { kind: 'invalid', message: `the tool_use id ${use.id} appears twice in one answer` };
    ids.add(use.id);
  }
  const names = uses.map((u) => u.name).join(', ');
  if (tally.turns >= bounds.maxTurns) return { kind: 'stop', reached: { bound: 'maxTurns', message: `the model still asked for tools (${names}) at turn ${tally.turns}, the last of ${bounds.maxTurns}` } };
  if (tally.tokens >= bounds.maxTokens) return { kind: 'stop', reached: { bound: 'maxTokens', message: `the model's turns used ${tally.tokens} tokens, the bound is ${bounds.maxTokens}` } };
  if (tally.toolCalls + uses.length > bounds.maxToolCalls) {
    return { kind: 'stop', reached: { bound: 'maxToolCalls', message: `the model asked for ${uses.length} more tool calls (${names}) after ${tally.toolCalls}, the bound is ${bounds.maxToolCalls}` } };
  }
  const calls: ToolCallPlan[] = [];
  const refused: RefusedToolCall[] = [];
  for (const use of uses) {
    const schema = tools.get(use.name);
    const refusal =
      schema === undefined
        ? `there is no tool named ${JSON.stringify(use.name.slice(0, 128))}; the tools are ${[...tools.keys()].join(', ')}`
        : use.input === undefined
          ? `the input is not a JSON object (${use.inputError ?? 'unreadable'})`
          : opts.inputProblem(schema, use.input);
    if (refusal !== undefined || use.input === undefined) refused.push({ id: use.id, name: use.name, error: refusal ?? 'the input is missing' });
    else calls.push({ id: use.id, name: use.name, input: use.input });
  }
  return { kind: 'call_tools', calls, refused };
}

/** The text blocks of an answer, concatenated. */
export function answerText(content: readonly LlmContentBlock[]): string {
  return content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join('');
}

/** The progress line of a turn: which tools it calls, and whether at once. */
export function turnProgress(where: string, turn: number, calls: readonly Pick<ToolCallPlan, 'name'>[]): string {
  if (calls.length === 0) return `running: ${where} turn ${turn}, asking the model`;
  const names = calls.map((c) => c.name);
  const list = names.length === 1 ? names[0]! : `${names.slice(0, -1).join(', ')} and ${names.at(-1)!}`;
  return `running: ${where} turn ${turn}, calling ${list}${calls.length > 1 ? ' in parallel' : ''}`;
}
