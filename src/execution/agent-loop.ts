import { toolInputProblem } from '../config/tool-input-schema.js';
import { ownEntry } from '../config/lookup.js';
import type { AgentStepConfig, SluiceConfig, TenantConfig } from '../config/schema.js';
import type { RunRequested } from '../events/schemas.js';
import type { Metrics } from '../obs/metrics.js';
import type { CancelReason } from '../runs/cancellation.js';
import { stepSequence } from '../runs/status-sequence.js';
import type { LlmContentBlock, LlmMessage, LlmMessageBlock, LlmTool } from '../steps/llm-call.js';
import { composeUserTurn } from '../steps/prompt.js';
import { StepError } from '../steps/step-error.js';
import type { TokenUsage } from '../status/run-usage.js';
import { settleWithLimit } from '../util/settle-with-limit.js';
import { agentStepDeadline, answerText, boundBeforeTurn, planTurn, turnProgress, type AgentBound, type AgentTally, type BoundReached, type ToolCallPlan } from './agent-policy.js';
import { DependencyUnavailable } from './call-guard.js';
import type { Unavailability } from './fallback-policy.js';
import type { OutcomePublisher } from './outcome-publisher.js';
import { OutputBoundExceeded, checkKept, checkStepOutput, jsonBytes, type OutputLimits, type OutputVerdict } from './output-bounds.js';
import type { RunProgress } from './run-progress.js';
import { StepRetryLater, type LlmCallOutput, type StepCaller, type StepOutputs } from './step-caller.js';

/** One model turn as the transcript summary shows it: what it said (cut short) and which tools it asked for. */
export interface TurnSummary {
  turn: number;
  text: string;
  tools: { id: string; name: string; isError: boolean }[];
}

/** An agent step's output: the answer, and what the loop did to get it (`calls` feed the run's usage and cost). */
export interface AgentOutput {
  text: string | null;
  agent: {
    turns: number;
    toolCalls: number;
    toolErrors: number;
    tokens: number;
    stoppedBy?: AgentBound;
    /** Each answered model turn's model and usage. */
    calls: { model: string; usage: TokenUsage }[];
    transcript: TurnSummary[];
    /** Tools that were unavailable (breaker open, no rate-limit turn in time) and answered as errors. */
    unavailable: Unavailability[];
  };
}

export type AgentEnd =
  | { kind: 'answered'; output: AgentOutput }
  /** A bound ended the loop; `output` is the transcript so far. */
  | { kind: 'stopped'; reached: BoundReached; output: AgentOutput }
  | { kind: 'cancelled'; reason: CancelReason };

/**
 * A model turn as journaled: the call's output without its `text`, which the text blocks of
 * `content` already hold (entries journaled before carry it too, and are read the same way).
 */
type JournaledTurn = Omit<LlmCallOutput, 'text'> & { content: LlmContentBlock[] };

function journaledTurn({ model, usage, content, stopReason }: LlmCallOutput): JournaledTurn {
  return { model, usage, content: content ?? [], stopReason };
}

/** A tool call's result as journaled and as the model reads it; `unavailable` is journaled too, so a resumed run's answer stays marked degraded. */
interface ToolResult {
  content: string;
  isError: boolean;
  unavailable?: Unavailability;
}

export interface AgentLoopDeps {
  config: Pick<SluiceConfig, 'dependencies' | 'processor'>;
  caller: Pick<StepCaller, 'callDependency'>;
  progress: Pick<RunProgress, 'record'>;
  outcomes: Pick<OutcomePublisher, 'running'>;
  metrics: Metrics;
  now: () => number;
}

export interface AgentStepRun {
  run: RunRequested;
  step: AgentStepConfig;
  stepIndex: number;
  /** The numbers of the step's status events (status-sequence.ts). */
  slots: number;
  /** The step as progress messages name it, e.g. `step 1/2 (triage)`. */
  where: string;
  input: unknown;
  outputs: StepOutputs;
  /** Journal entries of earlier deliveries: turns and tool results already done are not repeated. */
  done: ReadonlyMap<string, unknown>;
  /** Bytes of the outputs kept before this step: the step's journal entries count on top of them toward `processor.maxResultBytes`. */
  keptBytes: number;
  fallback: TenantConfig['fallback'];
}

/** Characters of a turn's text the transcript summary keeps. */
const SUMMARY_TEXT_CHARS = 300;

/** What the result's bound names when an agent's journal entries pass it. */
const JOURNALED = "the agent's turns and tool results so far, with the outputs before the step, are";

/** Bytes counted toward the result's bound so far: shared by a turn's parallel tool calls. */
interface KeptBytes {
  bytes: number;
}

/**
 * Counts a journal entry toward the bounds before it is kept, or throws OutputBoundExceeded:
 * nothing over a bound is stored or sent to the model again.
 */
function keep(kept: KeptBytes, entry: unknown, check: (bytes: number, keptBytes: number) => OutputVerdict): void {
  const bytes = jsonBytes(entry);
  const verdict = check(bytes, kept.bytes);
  if (!verdict.ok) throw new OutputBoundExceeded(verdict);
  kept.bytes += bytes;
}

/** Journal fields of an agent's turns and tool results; `#` cannot occur in a step id, so they never meet a step's own. */
export const turnKey = (stepId: string, turn: number): string => `${stepId}#turn-${turn}`;
export const toolResultKey = (stepId: string, turn: number, toolUseId: string): string => `${stepId}#turn-${turn}#${toolUseId}`;

/**
 * The callId of an agent's tool call, so its Idempotency-Key is `runId:stepId:turn-<n>:toolUseId`.
 * The turn is in it because a model may use a tool_use id again in a later turn, for another call
 * that must not get the first one's answer; a resumed run numbers its turns as the journal does,
 * so a call repeated after a crash still sends the key it was first made with.
 */
export const toolCallId = (stepId: string, turn: number, toolUseId: string): string => `${stepId}:turn-${turn}:${toolUseId}`;

/**
 * An agent step's Messages API tool-use loop. Each model turn and each tool call goes through the
 * step caller, so each holds its dependency's permit, meets its breaker and pacing, and has its
 * timeout clamped to the step's deadline. Each answered turn and each tool result is journaled
 * before the loop goes on, so a redelivered run resumes where it stopped and a tool call that
 * completed is not made again (its Idempotency-Key, `runId:stepId:turn-<n>:toolUseId`, guards the rest).
 * A model turn that fails throws as an LLM step's call does; a tool call that fails becomes an
 * `is_error` result the model reads, except an unavailable tool of a `fail` tenant, which throws.
 * What is journaled is bounded as step outputs are: a turn by `processor.maxStepOutputBytes`,
 * and every turn and tool result with the outputs before the step by `processor.maxResultBytes`
 * (they are all held, and sent to the model each turn); past either the step throws
 * OutputBoundExceeded and the entry is not stored.
 */
export class AgentLoop {
  constructor(private readonly deps: AgentLoopDeps) {}

  async run(a: AgentStepRun): Promise<AgentEnd> {
    const { run, step } = a;
    const { now } = this.deps;
    const stepDeadline = agentStepDeadline(run.deadline, now(), step.bounds.deadlineShare);
    // Every call of the step is clamped to the step's deadline, not only the run's.
    const callRun: RunRequested = stepDeadline < run.deadline ? { ...run, deadline: stepDeadline } : run;
    const schemas = new Map(step.tools.map((name) => [name, this.inputSchemaOf(name)]));
    const tools: LlmTool[] = step.tools.map((name) => ({ name, description: this.descriptionOf(name), inputSchema: schemas.get(name)! }));
    const messages: LlmMessage[] = [{ role: 'user', content: composeUserTurn(a.input, a.outputs) }];
    const output: AgentOutput = { text: null, agent: { turns: 0, toolCalls: 0, toolErrors: 0, tokens: 0, calls: [], transcript: [], unavailable: [] } };
    // The bounds count what the output reports: one set of figures, not a copy kept in step.
    const tally: AgentTally = output.agent;
    const limits: OutputLimits = this.deps.config.processor;
    const kept: KeptBytes = { bytes: a.keptBytes };
    let lastResults: ToolResult[] = [];

    for (;;) {
      const reached = boundBeforeTurn(tally, step.bounds, now(), stepDeadline);
      if (reached) return this.stopped(reached, output);
      const turn = tally.turns + 1;
      this.report(a, 2 * turn - 2, turn === 1 ? turnProgress(a.where, 1, []) : `${turnProgress(a.where, turn, [])} with ${describeResults(lastResults)}`);
      const key = turnKey(step.id, turn);
      const journaled = a.done.get(key) as JournaledTurn | undefined;
      let answer: JournaledTurn;
      if (journaled?.content) answer = journaled;
      else {
        try {
          answer = journaledTurn((await this.deps.caller.callDependency(callRun, { kind: 'llm', dependency: step.dependency, callId: `${step.id}:turn-${turn}`, system: step.system, messages, tools, model: step.model, maxTokens: step.maxTokens })) as LlmCallOutput);
        } catch (err) {
          // The step's share of the deadline ran out during the call: that is the bound, not a failure.
          if (step.bounds.deadlineShare < 1 && now() >= stepDeadline) return this.stopped(boundBeforeTurn(tally, step.bounds, now(), stepDeadline)!, output);
          throw err;
        }
        this.deps.metrics.agentTurns.inc({ workflow: run.workflow });
      }
      // A journaled turn is counted too: the bounds may have been lowered since, and it is held all the same.
      keep(kept, answer, (bytes, keptBytes) => checkStepOutput(bytes, keptBytes, limits, { one: `turn ${turn}'s answer is`, all: JOURNALED }));
      if (answer !== journaled) {
        const cancelled = await this.deps.progress.record(run.runId, key, answer, run.deadline);
        if (cancelled) return { kind: 'cancelled', reason: cancelled };
      }
      const { content } = answer;
      tally.turns = turn;
      tally.tokens += answer.usage.inputTokens + answer.usage.outputTokens;
      output.agent.calls.push({ model: answer.model, usage: answer.usage });
      const summary: TurnSummary = { turn, text: answerText(content).slice(0, SUMMARY_TEXT_CHARS), tools: [] };
      output.agent.transcript.push(summary);
      messages.push({ role: 'assistant', content: apiContent(content) });

      const plan = planTurn({ content, tally, bounds: step.bounds, tools: schemas, inputProblem: toolInputProblem });
      if (plan.kind === 'answer') {
        output.text = plan.text;
        return { kind: 'answered', output: output };
      }
      if (plan.kind === 'stop') return this.stopped(plan.reached, output);
      if (plan.kind === 'invalid') throw new StepError('bad_response', step.dependency, `${step.dependency}: ${plan.message}`, false);

      tally.toolCalls += plan.calls.length + plan.refused.length;
      this.report(a, 2 * turn - 1, turnProgress(a.where, turn, plan.calls));
      const results = new Map<string, ToolResult>(plan.refused.map((r) => [r.id, { content: r.error, isError: true }]));
      const cancellations: CancelReason[] = [];
      const settled = await settleWithLimit(plan.calls, step.bounds.maxParallelTools, (call) => this.callTool(a, callRun, turn, call, kept, cancellations));
      // The caller's explicit request comes first, as at every step boundary.
      if (cancellations.length > 0) return { kind: 'cancelled', reason: cancellations[0]! };
      // Every call is settled (and journaled) before a failure ends the attempt, so none is made twice.
      const thrown = settled.find((s) => s.status === 'rejected');
      if (thrown) throw thrown.reason;
      plan.calls.forEach((call, i) => results.set(call.id, (settled[i] as PromiseFulfilledResult<ToolResult>).value));
      lastResults = [];
      const blocks: LlmMessageBlock[] = [];
      for (const use of content) {
        if (use.type !== 'tool_use') continue;
        const result = results.get(use.id)!;
        lastResults.push(result);
        if (result.unavailable) output.agent.unavailable.push(result.unavailable);
        summary.tools.push({ id: use.id, name: use.name, isError: result.isError });
        blocks.push({ type: 'tool_result', tool_use_id: use.id, content: result.content, ...(result.isError ? { is_error: true } : {}) });
      }
      output.agent.toolErrors += lastResults.filter((r) => r.isError).length;
      messages.push({ role: 'user', content: blocks });
    }
  }

  /**
   * One tool call, or its journaled result. A failure is the model's to read as an `is_error`
   * result, and journaled like a success: the model's next turn is built on it either way. A
   * cancellation read as the result is journaled goes into `cancellations`.
   */
  private async callTool(a: AgentStepRun, callRun: RunRequested, turn: number, call: ToolCallPlan, kept: KeptBytes, cancellations: CancelReason[]): Promise<ToolResult> {
    const key = toolResultKey(a.step.id, turn, call.id);
    const limits: OutputLimits = this.deps.config.processor;
    // A result over maxStepOutputBytes is already an is_error result the model reads; only the whole journal's bound ends the step.
    const keepResult = (result: ToolResult) => keep(kept, result, (bytes, keptBytes) => checkKept(keptBytes + bytes, limits, JOURNALED));
    const journaled = a.done.get(key) as ToolResult | undefined;
    if (journaled && typeof journaled.content === 'string') {
      keepResult(journaled);
      return journaled;
    }
    let result: ToolResult;
    try {
      const value = await this.deps.caller.callDependency(callRun, { kind: 'tool', dependency: call.name, callId: toolCallId(a.step.id, turn, call.id), body: { input: call.input } });
      const bytes = jsonBytes(value);
      const bound = this.deps.config.processor.maxStepOutputBytes;
      result = bytes > bound ? { content: `the ${call.name} result is ${bytes} bytes, over the bound of ${bound}`, isError: true } : { content: JSON.stringify(value ?? null), isError: false };
    } catch (err) {
      if (err instanceof DependencyUnavailable) {
        // A `fail` tenant takes no answer built without the tool; the step loop fails the run.
        if (a.fallback === 'fail') throw err;
        result = { content: `the ${call.name} tool is unavailable right now (${err.message}); do not guess what it would have said`, isError: true, unavailable: { dependency: err.dependency, reason: err.message } };
      } else if (err instanceof StepError || err instanceof StepRetryLater) {
        result = { content: `the ${call.name} tool failed: ${err.message}`, isError: true };
      } else throw err;
    }
    this.deps.metrics.agentToolCalls.inc({ dependency: call.name, outcome: result.isError ? 'error' : 'ok' });
    keepResult(result);
    const cancelled = await this.deps.progress.record(a.run.runId, key, result, a.run.deadline);
    if (cancelled) cancellations.push(cancelled);
    return result;
  }

  private stopped(reached: BoundReached, output: AgentOutput): AgentEnd {
    output.agent.stoppedBy = reached.bound;
    this.deps.metrics.agentStops.inc({ bound: reached.bound });
    return { kind: 'stopped', reached, output };
  }

  /** A progress event in the step's block of numbers; past the block, the turn goes unreported (the sink would drop a reused number). */
  private report(a: AgentStepRun, progress: number, message: string): void {
    if (progress >= a.slots) return;
    this.deps.outcomes.running(a.run, { sequence: stepSequence(a.run.attempt, a.stepIndex, { progress, slots: a.slots }), message, step: a.step.id });
  }

  private inputSchemaOf(tool: string): Record<string, unknown> {
    const dep = ownEntry(this.deps.config.dependencies, tool);
    // Config validation guarantees this; a config changed under a running run is caught here.
    if (dep?.kind !== 'tool' || !dep.inputSchema) throw new StepError('bad_response', tool, `tool "${tool}" has no inputSchema`, false);
    return dep.inputSchema;
  }

  private descriptionOf(tool: string): string {
    const dep = ownEntry(this.deps.config.dependencies, tool);
    return (dep?.kind === 'tool' ? dep.description : undefined) ?? tool;
  }
}

/** The answer's blocks as the next request sends them back. */
function apiContent(content: readonly LlmContentBlock[]): LlmMessageBlock[] {
  // The API refuses an empty text block, which a model may stream before its tool calls.
  return content.flatMap((b): LlmMessageBlock[] => {
    if (b.type === 'tool_use') return [{ type: 'tool_use', id: b.id, name: b.name, input: b.input ?? {} }];
    return b.text === '' ? [] : [{ type: 'text', text: b.text }];
  });
}

function describeResults(results: readonly ToolResult[]): string {
  const failed = results.filter((r) => r.isError).length;
  return `${results.length} tool result${results.length === 1 ? '' : 's'}${failed > 0 ? ` (${failed} failed)` : ''}`;
}
