/**
 * The tokens and cost of a completed run's LLM calls: carried in its result as `usage`, stored in
 * Postgres `run_usage` by the status sink, shown by `GET /v1/runs/:id` and summed by `sluice usage`.
 * Token names follow the Messages API's usage (`input_tokens` excludes the cached tokens).
 */

export interface TokenUsage {
  inputTokens: number;
  outputTokens: number;
  cacheCreationInputTokens: number;
  cacheReadInputTokens: number;
}

/** Tokens of some calls and what they cost in US dollars; `costUsd` is null when a call's model has no price. */
export interface PricedUsage extends TokenUsage {
  llmCalls: number;
  costUsd: number | null;
}

/** A run's usage: the total, and the same by model (the model label of `sluice_llm_tokens_total`). */
export interface RunUsage extends PricedUsage {
  byModel: Record<string, PricedUsage>;
}

/** Dollars rounded to a millionth of a cent: sums of fractions print without float noise. */
export function roundUsd(usd: number): number {
  return Math.round(usd * 1e8) / 1e8;
}

export const TOKEN_FIELDS = ['inputTokens', 'outputTokens', 'cacheCreationInputTokens', 'cacheReadInputTokens'] as const satisfies readonly (keyof TokenUsage)[];

/** A token or call count: a non-negative safe integer. */
export const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
const isCost = (v: unknown): v is number | null => v === null || (typeof v === 'number' && Number.isFinite(v) && v >= 0);

function isPricedUsage(v: unknown): v is PricedUsage {
  if (typeof v !== 'object' || v === null) return false;
  const u = v as Record<string, unknown>;
  return TOKEN_FIELDS.every((f) => isCount(u[f])) && isCount(u.llmCalls) && isCost(u.costUsd);
}

/** The `usage` of a completed run's result JSON; undefined for a result without one (or not ours to trust). */
export function runUsageOf(result: string | null): RunUsage | undefined {
  if (result === null) return undefined;
  let usage: unknown;
  try {
    usage = (JSON.parse(result) as { usage?: unknown } | null)?.usage;
  } catch {
    return undefined;
  }
  if (!isPricedUsage(usage)) return undefined;
  const byModel = (usage as { byModel?: unknown }).byModel;
  if (typeof byModel !== 'object' || byModel === null || !Object.values(byModel).every(isPricedUsage)) return undefined;
  return usage as RunUsage;
}
