import type { LlmDependencyConfig, SluiceConfig } from '../config/schema.js';
import type { RunRequested } from '../events/schemas.js';
import type { LlmUsage } from '../steps/llm-call.js';

/**
 * What the processor measures of a run: times against its admission, and which attempts measure
 * them; the tokens of its LLM calls and their labels. The times are read off two clocks:
 * `admittedAt` is the API instance's, `at` the processor's.
 */

/** Seconds from a run's admission to `at`; a processor clock behind the API's reads as 0, not as a negative wait. */
export function secondsSinceAdmission(admittedAt: number, at: number): number {
  return Math.max(0, at - admittedAt) / 1000;
}

/**
 * Whether an attempt's start measures the wait since admission. Only an attempt that starts from
 * an admission does: the first, and a DLQ replay (which re-admits the run: a fresh `admittedAt`),
 * both without a due time. A run-level retry has a due time; since its admission it has run
 * earlier attempts and waited out a backoff, which is no queue's wait (the retry topic's depth
 * and its consumer group's lag show those). A start repeated by this processor after an
 * infrastructure failure was measured at the first start.
 */
export function measuresAdmissionWait(run: Pick<RunRequested, 'dueAt'>, infraFailures: number): boolean {
  return run.dueAt === null && infraFailures === 0;
}

/** `kind` of `sluice_llm_tokens_total`: the four counts of the Messages API's usage. */
export type TokenKind = 'input' | 'output' | 'cache_read' | 'cache_creation';

/**
 * The `model` label of a response's tokens. A label value never comes from response data: the
 * model the response names is taken only if it is one the config names (a dependency's `model`),
 * else the tokens count under the dependency's configured model (an alias answered by a dated
 * model, a proxy's own name, a hostile endpoint's garbage).
 */
export function tokenModelLabel(dependencies: SluiceConfig['dependencies'], dependency: Pick<LlmDependencyConfig, 'model'>, responseModel: string): string {
  const configured = Object.values(dependencies).some((d) => d.kind === 'llm' && d.model === responseModel);
  return configured ? responseModel : dependency.model;
}

/** The increments of `sluice_llm_tokens_total` for one response, every kind (0 too, so each series exists from the first call). */
export function tokenCounts(usage: LlmUsage): [TokenKind, number][] {
  return [
    ['input', usage.inputTokens],
    ['output', usage.outputTokens],
    ['cache_read', usage.cacheReadTokens],
    ['cache_creation', usage.cacheCreationTokens],
  ];
}
