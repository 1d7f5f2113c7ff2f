import type { ModelPrice, PricingConfig, SluiceConfig } from '../config/schema.js';
import type { LlmUsage } from './llm-call.js';

/** Anthropic's price of a 5-minute cache write and of a cache read, as multiples of the input price. */
const CACHE_WRITE_PER_INPUT = 1.25;
const CACHE_READ_PER_INPUT = 0.1;

/** The price of `model`: the entry of the longest key that is the model's name or a prefix of it. */
export function priceOf(pricing: PricingConfig, model: string): ModelPrice | undefined {
  let best: [string, ModelPrice] | undefined;
  for (const entry of Object.entries(pricing.models)) {
    if (model.startsWith(entry[0]) && (best === undefined || entry[0].length > best[0].length)) best = entry;
  }
  return best?.[1];
}

/**
 * US dollars of one response's tokens. The Messages API's `input_tokens` excludes the cached
 * tokens, so the four counts are priced separately and added.
 */
export function callCostUsd(usage: LlmUsage, price: ModelPrice): number {
  const cacheWrite = price.cacheWritePerMillionTokens ?? price.inputPerMillionTokens * CACHE_WRITE_PER_INPUT;
  const cacheRead = price.cacheReadPerMillionTokens ?? price.inputPerMillionTokens * CACHE_READ_PER_INPUT;
  return (
    (usage.inputTokens * price.inputPerMillionTokens +
      usage.outputTokens * price.outputPerMillionTokens +
      usage.cacheCreationTokens * cacheWrite +
      usage.cacheReadTokens * cacheRead) /
    1_000_000
  );
}

/** The models of the config's LLM dependencies that no pricing entry matches: their cost would be unknown. */
export function unpricedModels(config: Pick<SluiceConfig, 'dependencies' | 'pricing'>): string[] {
  const models = Object.values(config.dependencies).flatMap((d) => (d.kind === 'llm' ? [d.model] : []));
  return [...new Set(models)].filter((m) => priceOf(config.pricing, m) === undefined);
}
