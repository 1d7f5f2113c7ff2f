import { ownEntry } from '../config/lookup.js';
import type { DependencyConfig, LlmDependencyConfig, SluiceConfig, StepConfig } from '../config/schema.js';
import { dependencyOf } from '../config/workflows.js';
import type { Metrics } from '../obs/metrics.js';
import { MAX_BYTES_PER_TOKEN, type LlmResult, type LlmUsage } from '../steps/llm-call.js';
import { callCostUsd, priceOf } from '../steps/llm-pricing.js';
import { TOKEN_FIELDS, isCount, roundUsd, type PricedUsage, type RunUsage, type TokenUsage } from '../status/run-usage.js';
import { tokenCounts, tokenModelLabel } from './run-signals.js';

/**
 * Where LLM tokens become metrics and a run's usage. Each response is counted once, when it
 * arrives (tokens, and cost or unpriced tokens); its step output keeps its usage, so the run's
 * summary is summed from the outputs, those the journal kept from earlier attempts included.
 */

type UsageConfig = Pick<SluiceConfig, 'dependencies' | 'pricing'>;

/** The `usage` of an LLM step's output: the response's four counts, named as in the Messages API. */
export function stepUsage(usage: LlmUsage): TokenUsage {
  return { inputTokens: usage.inputTokens, outputTokens: usage.outputTokens, cacheCreationInputTokens: usage.cacheCreationTokens, cacheReadInputTokens: usage.cacheReadTokens };
}

/** The usual rule of thumb, about four characters a token: what an answer's bytes are charged at when its own count cannot be believed. */
export const TYPICAL_BYTES_PER_TOKEN = 4;

/**
 * The usage Sluice counts for an answer that streamed `answerBytes` of text and tool input: the
 * provider's, unless it reports fewer output tokens than those bytes can be at the most a token
 * carries (MAX_BYTES_PER_TOKEN, as the answer's bound assumes). Such a count is implausible (a
 * broken or hostile provider, or a proxy that drops `usage`), and the output is charged at
 * TYPICAL_BYTES_PER_TOKEN instead: what the bytes most likely cost. An honest count is never
 * replaced, and the result is never below what the provider reported.
 */
export function countedUsage(usage: LlmUsage, answerBytes: number): LlmUsage {
  if (usage.outputTokens >= Math.ceil(answerBytes / MAX_BYTES_PER_TOKEN)) return usage;
  return { ...usage, outputTokens: Math.ceil(answerBytes / TYPICAL_BYTES_PER_TOKEN) };
}

/** The response's model label, and its cost in US dollars (undefined: no price for the model). */
function pricedCall(config: UsageConfig, dep: Pick<LlmDependencyConfig, 'model'>, responseModel: string, usage: LlmUsage): { model: string; costUsd: number | undefined } {
  const model = tokenModelLabel(config.dependencies, dep, responseModel);
  const price = priceOf(config.pricing, model);
  return { model, costUsd: price ? callCostUsd(usage, price) : undefined };
}

/** Counts one response in `sluice_llm_tokens_total` and in `sluice_llm_cost_usd_total` or `sluice_llm_unpriced_tokens_total`. */
export function countLlmResponse(metrics: Metrics, config: UsageConfig, labels: { tenant: string; workflow: string }, dep: Pick<LlmDependencyConfig, 'model'>, res: Pick<LlmResult, 'model' | 'usage'>): void {
  const { model, costUsd } = pricedCall(config, dep, res.model, res.usage);
  const counts = tokenCounts(res.usage);
  for (const [kind, tokens] of counts) metrics.llmTokens.inc({ ...labels, model, kind }, tokens);
  if (costUsd !== undefined) metrics.llmCost.inc({ ...labels, model }, costUsd);
  else metrics.llmUnpricedTokens.inc({ ...labels, model }, counts.reduce((sum, [, tokens]) => sum + tokens, 0));
}

/** The model and usage an LLM step's output records; undefined for a stand-in or an output without them. */
function recordedCall(output: unknown): { model: string; usage: LlmUsage } | undefined {
  if (typeof output !== 'object' || output === null) return undefined;
  const { model, usage } = output as { model?: unknown; usage?: Partial<Record<keyof TokenUsage, unknown>> };
  if (typeof model !== 'string' || typeof usage !== 'object' || usage === null) return undefined;
  const count = (v: unknown) => (isCount(v) ? v : 0);
  return {
    model,
    usage: { inputTokens: count(usage.inputTokens), outputTokens: count(usage.outputTokens), cacheCreationTokens: count(usage.cacheCreationInputTokens), cacheReadTokens: count(usage.cacheReadInputTokens) },
  };
}

const emptyUsage = (): PricedUsage => ({ inputTokens: 0, outputTokens: 0, cacheCreationInputTokens: 0, cacheReadInputTokens: 0, llmCalls: 0, costUsd: 0 });

function addCall(to: PricedUsage, usage: TokenUsage, costUsd: number | undefined): void {
  for (const f of TOKEN_FIELDS) to[f] += usage[f];
  to.llmCalls += 1;
  to.costUsd = to.costUsd === null || costUsd === undefined ? null : to.costUsd + costUsd;
}

/**
 * The usage of a run's LLM and agent steps from their outputs: one answered call per LLM step, and per agent turn, that has an
 * output (called in this attempt or kept by the journal). Calls that failed, and answers a crash
 * lost before the journal kept them, are not in it (the metrics count them).
 */
export function runUsage(steps: readonly StepConfig[], outputs: Readonly<Record<string, unknown>>, config: UsageConfig): RunUsage {
  const total = emptyUsage();
  // No prototype: a model label is config text, and `__proto__` must be a key like any other.
  const byModel = Object.create(null) as Record<string, PricedUsage>;
  for (const step of steps) {
    if (step.kind === 'tool') continue;
    const dep: DependencyConfig | undefined = ownEntry(config.dependencies, dependencyOf(step));
    if (dep?.kind !== 'llm') continue;
    const output = outputs[step.id];
    // An agent's output lists each of its answered turns; an LLM step's output is its one call.
    const calls = step.kind === 'agent' ? agentCalls(output) : [output];
    for (const recorded of calls) {
      const call = recordedCall(recorded);
      if (!call) continue;
      const { model, costUsd } = pricedCall(config, dep, call.model, call.usage);
      const usage = stepUsage(call.usage);
      addCall(total, usage, costUsd);
      addCall((byModel[model] ??= emptyUsage()), usage, costUsd);
    }
  }
  for (const u of [total, ...Object.values(byModel)]) u.costUsd = u.costUsd === null ? null : roundUsd(u.costUsd);
  return { ...total, byModel };
}

/** The calls an agent step's output records (`agent.calls`); none for a stand-in or an output without them. */
function agentCalls(output: unknown): unknown[] {
  if (typeof output !== 'object' || output === null) return [];
  const agent = (output as { agent?: { calls?: unknown } }).agent;
  return Array.isArray(agent?.calls) ? agent.calls : [];
}
