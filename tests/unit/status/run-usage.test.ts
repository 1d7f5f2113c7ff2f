import { describe, expect, it } from 'vitest';
import { runUsageOf } from '../../../src/status/run-usage.js';

const usage = { inputTokens: 10, outputTokens: 2, cacheCreationInputTokens: 0, cacheReadInputTokens: 5, llmCalls: 1, costUsd: 0.0001, byModel: { m: { inputTokens: 10, outputTokens: 2, cacheCreationInputTokens: 0, cacheReadInputTokens: 5, llmCalls: 1, costUsd: 0.0001 } } };

describe('runUsageOf', () => {
  it('reads the usage of a result', () => {
    expect(runUsageOf(JSON.stringify({ text: 'a', steps: [], usage }))).toEqual(usage);
    expect(runUsageOf(JSON.stringify({ usage: { ...usage, costUsd: null } }))?.costUsd).toBeNull();
  });

  it.each([
    ['no result', null],
    ['a result that is not JSON', '{'],
    ['a result without usage (an older processor)', JSON.stringify({ text: 'a', steps: [] })],
    ['a JSON null', 'null'],
    ['a negative count', JSON.stringify({ usage: { ...usage, outputTokens: -1 } })],
    ['a fractional count', JSON.stringify({ usage: { ...usage, inputTokens: 1.5 } })],
    ['a negative cost', JSON.stringify({ usage: { ...usage, costUsd: -1 } })],
    ['no byModel', JSON.stringify({ usage: { ...usage, byModel: undefined } })],
    ['a bad model entry', JSON.stringify({ usage: { ...usage, byModel: { m: { llmCalls: 1 } } } })],
  ])('has none for %s', (_, result) => {
    expect(runUsageOf(result)).toBeUndefined();
  });
});
