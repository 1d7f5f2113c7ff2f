import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import { callCostUsd, priceOf, unpricedModels } from '../../../src/steps/llm-pricing.js';

const sonnet = { inputPerMillionTokens: 3, outputPerMillionTokens: 15, cacheWritePerMillionTokens: 3.75, cacheReadPerMillionTokens: 0.3 };
const opus = { inputPerMillionTokens: 15, outputPerMillionTokens: 75 };
const pricing = { models: { 'claude-sonnet-4': sonnet, 'claude-opus-4': opus, 'claude-opus-4-5': { inputPerMillionTokens: 5, outputPerMillionTokens: 25 } } };
const none = { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheCreationTokens: 0 };

describe('priceOf', () => {
  it('takes a key equal to the model or a prefix of it, the longest one', () => {
    expect(priceOf(pricing, 'claude-sonnet-4')).toBe(sonnet);
    expect(priceOf(pricing, 'claude-sonnet-4-6')).toBe(sonnet);
    expect(priceOf(pricing, 'claude-opus-4-1-20250805')).toBe(opus);
    expect(priceOf(pricing, 'claude-opus-4-5-20251101')).toEqual({ inputPerMillionTokens: 5, outputPerMillionTokens: 25 });
  });

  it('knows no price for a model no key starts', () => {
    expect(priceOf(pricing, 'claude-sonnet-3-7')).toBeUndefined();
    expect(priceOf(pricing, 'claude')).toBeUndefined();
    expect(priceOf(pricing, 'constructor')).toBeUndefined();
    expect(priceOf({ models: {} }, 'claude-sonnet-4-6')).toBeUndefined();
  });
});

describe('callCostUsd', () => {
  it('prices each of the four counts at its own rate, per million tokens', () => {
    expect(callCostUsd({ ...none, inputTokens: 1_000_000 }, sonnet)).toBe(3);
    expect(callCostUsd({ ...none, outputTokens: 1_000_000 }, sonnet)).toBe(15);
    expect(callCostUsd({ ...none, cacheCreationTokens: 1_000_000 }, sonnet)).toBe(3.75);
    expect(callCostUsd({ ...none, cacheReadTokens: 1_000_000 }, sonnet)).toBeCloseTo(0.3, 12);
    expect(callCostUsd({ inputTokens: 1_200, outputTokens: 300, cacheCreationTokens: 2_000, cacheReadTokens: 10_000 }, sonnet)).toBeCloseTo((1_200 * 3 + 300 * 15 + 2_000 * 3.75 + 10_000 * 0.3) / 1e6, 12);
  });

  it('prices cache writes at 1.25× and reads at 0.1× the input price when not given', () => {
    expect(callCostUsd({ ...none, cacheCreationTokens: 1_000_000 }, opus)).toBe(18.75);
    expect(callCostUsd({ ...none, cacheReadTokens: 1_000_000 }, opus)).toBeCloseTo(1.5, 12);
  });

  it('a zero price is a price: the call is free, not unpriced', () => {
    expect(callCostUsd({ ...none, inputTokens: 500, outputTokens: 20 }, { inputPerMillionTokens: 0, outputPerMillionTokens: 0 })).toBe(0);
  });
});

describe('unpricedModels', () => {
  it('lists each configured LLM model without a price once', () => {
    const llm = (model: string) => ({ kind: 'llm', model }) as const;
    const dependencies = { a: llm('claude-sonnet-4-6'), b: llm('gpt-x'), c: llm('gpt-x'), t: { kind: 'tool' } } as never;
    expect(unpricedModels({ dependencies, pricing })).toEqual(['gpt-x']);
  });

  it('the built-in config prices the models it uses', () => {
    expect(unpricedModels(loadConfig({ env: {} }))).toEqual([]);
  });
});
