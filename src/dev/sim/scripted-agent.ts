/**
 * The scripted agent the provider simulator plays when a Messages request offers tools: a fixed
 * number of tool-use turns, then a final answer, so a tool-use loop can be driven end to end.
 * Everything here is pure; ids, latency and faults are the simulator's business.
 */
import { isRecord } from '../../util/is-record.js';

export interface AgentTool {
  name: string;
  description?: string;
  input_schema: Record<string, unknown>;
}

export interface AgentScript {
  /** Answers that ask for tools before the final answer. */
  toolTurns: number;
  /** Tool calls asked for in one turn, at most one per offered tool. */
  parallel: number;
  /** A tool the request did not offer, also asked for on the first tool turn. */
  unknownTool: string | undefined;
  /** The first tool call's input is `{}`, which fails any schema with required fields. */
  invalidInput: boolean;
  /** Each turn numbers its tool_use ids from `toolu_sim_0`, using the ids of earlier turns again. */
  repeatIds: boolean;
}

export type AgentScriptResult = { ok: true; value: AgentScript } | { ok: false; message: string };

/** What the script needs to know of the conversation so far. */
export interface Conversation {
  /** Assistant messages already in the conversation: the index of the turn to answer. */
  assistantTurns: number;
  toolResults: number;
  failedToolResults: number;
}

export interface ToolCall {
  name: string;
  input: Record<string, unknown>;
}

/** One answer: a short text, then the tool calls (none when the stop reason is `end_turn`). */
export interface AgentTurn {
  text: string;
  calls: ToolCall[];
  stopReason: 'tool_use' | 'end_turn';
}

export const DEFAULT_SCRIPT: Readonly<AgentScript> = Object.freeze({ toolTurns: 2, parallel: 2, unknownTool: undefined, invalidInput: false, repeatIds: false });
export const TOOL_TURNS_BOUNDS = { min: 0, max: 10_000 } as const;
export const PARALLEL_BOUNDS = { min: 1, max: 16 } as const;
/** The Messages API's bound on a tool name, which also bounds the one the script invents. */
export const MAX_TOOL_NAME_LENGTH = 128;

const DIRECTIVE_START = '[sim-agent';
/** `id`, `order_id`, `ORDER-ID`, `orderId`, `orderID`; not `paid`. */
const ID_PROPERTY = /(?:^|[_-])(?:id|Id|ID)$|[a-z0-9](?:Id|ID)$/;

/**
 * Reads the one `[sim-agent key=value …]` directive of a system prompt; without one the script is
 * the default. A directive the sim cannot follow exactly is refused rather than half-obeyed, so a
 * typo in a test fixture shows up as a 400 instead of a quietly different conversation.
 */
export function parseAgentDirective(system: string, offeredTools: readonly string[]): AgentScriptResult {
  const occurrences = system.split(DIRECTIVE_START).length - 1;
  if (occurrences === 0) return { ok: true, value: { ...DEFAULT_SCRIPT } };
  if (occurrences > 1) return refuse('more than one [sim-agent] directive');
  const body = /\[sim-agent((?:[ \t][^\]\n]*)?)\]/.exec(system)?.[1];
  if (body === undefined) return refuse('[sim-agent] directive must be one line like [sim-agent tool-turns=2 parallel=2]');
  const script: AgentScript = { ...DEFAULT_SCRIPT };
  const seen = new Set<string>();
  for (const token of body.trim().split(/\s+/).filter((t) => t !== '')) {
    const equals = token.indexOf('=');
    const key = equals === -1 ? token : token.slice(0, equals);
    const value = equals === -1 ? undefined : token.slice(equals + 1);
    if (seen.has(key)) return refuse(`[sim-agent] ${key} given twice`);
    seen.add(key);
    switch (key) {
      case 'tool-turns':
      case 'parallel': {
        const bounds = key === 'tool-turns' ? TOOL_TURNS_BOUNDS : PARALLEL_BOUNDS;
        const count = value !== undefined && /^\d+$/.test(value) ? Number(value) : NaN;
        if (!(count >= bounds.min && count <= bounds.max)) {
          return refuse(`[sim-agent] ${key} must be an integer from ${bounds.min} to ${bounds.max}`);
        }
        if (key === 'tool-turns') script.toolTurns = count;
        else script.parallel = count;
        break;
      }
      case 'unknown-tool':
        if (value === undefined || value === '' || value.length > MAX_TOOL_NAME_LENGTH) {
          return refuse(`[sim-agent] unknown-tool must name a tool of 1 to ${MAX_TOOL_NAME_LENGTH} characters`);
        }
        if (offeredTools.includes(value)) return refuse(`[sim-agent] unknown-tool "${value}" is one of the request's tools`);
        script.unknownTool = value;
        break;
      case 'invalid-input':
      case 'repeat-ids':
        if (value !== undefined) return refuse(`[sim-agent] ${key} takes no value`);
        if (key === 'invalid-input') script.invalidInput = true;
        else script.repeatIds = true;
        break;
      default:
        return refuse(`[sim-agent] unknown key "${key}"; expected tool-turns, parallel, unknown-tool, invalid-input or repeat-ids`);
    }
  }
  return { ok: true, value: script };
}

function refuse(message: string): AgentScriptResult {
  return { ok: false, message };
}

/** Counts turns and tool results; content that is not a list of blocks holds no tool results. */
export function readConversation(messages: readonly { role: 'user' | 'assistant'; content: unknown }[]): Conversation {
  const conversation: Conversation = { assistantTurns: 0, toolResults: 0, failedToolResults: 0 };
  for (const message of messages) {
    if (message.role === 'assistant') conversation.assistantTurns += 1;
    if (!Array.isArray(message.content)) continue;
    for (const block of message.content as unknown[]) {
      if (!isRecord(block) || block.type !== 'tool_result') continue;
      conversation.toolResults += 1;
      if (block.is_error === true) conversation.failedToolResults += 1;
    }
  }
  return conversation;
}

/**
 * The answer to the next turn. Tool turns walk the offered tools round-robin, each turn starting
 * where `parallel` calls per turn would have left off, and never ask for one tool twice in a turn.
 */
export function nextTurn(script: AgentScript, tools: readonly AgentTool[], conversation: Conversation): AgentTurn {
  const turn = conversation.assistantTurns;
  if (turn >= script.toolTurns || tools.length === 0) {
    const { toolResults, failedToolResults } = conversation;
    return { text: `Answered from ${plural(toolResults, 'tool result')} (${failedToolResults} failed).`, calls: [], stopReason: 'end_turn' };
  }
  const start = (turn * script.parallel) % tools.length;
  const calls = Array.from({ length: Math.min(script.parallel, tools.length) }, (_, i): ToolCall => {
    const tool = tools[(start + i) % tools.length]!;
    const invalid = script.invalidInput && turn === 0 && i === 0;
    return { name: tool.name, input: invalid ? {} : sampleInput(tool.input_schema, turn) };
  });
  if (turn === 0 && script.unknownTool !== undefined) calls.push({ name: script.unknownTool, input: {} });
  return { text: `Looking up ${calls.map((call) => call.name).join(', ')}.`, calls, stopReason: 'tool_use' };
}

function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

/** An input that satisfies the schema's required properties (and names only those), varying with the turn. */
export function sampleInput(schema: Record<string, unknown>, turn: number): Record<string, unknown> {
  const properties = isRecord(schema.properties) ? schema.properties : {};
  const required = Array.isArray(schema.required) ? schema.required.filter((name): name is string => typeof name === 'string') : [];
  return Object.fromEntries(required.map((name) => [name, sampleValue(name, properties[name], turn)]));
}

function sampleValue(name: string, schema: unknown, turn: number): unknown {
  if (!isRecord(schema)) return null;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  switch (schema.type) {
    case 'string':
      // Identifiers look like ids so that demo tools keyed on them (order-lookup) answer plausibly.
      return ID_PROPERTY.test(name) ? `A-100${turn}` : `${name} ${turn}`;
    case 'integer':
    case 'number':
      return 1;
    case 'boolean':
      return true;
    case 'object':
      return sampleInput(schema, turn);
    case 'array':
      return [];
    default:
      return null;
  }
}
