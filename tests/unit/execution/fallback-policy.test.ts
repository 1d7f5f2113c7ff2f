import { describe, expect, it } from 'vitest';
import { degradedCompletion, fallbackFor, isDegradedResult } from '../../../src/execution/fallback-policy.js';

const declared = { fallback: { text: 'We cannot answer right now.' } };
const undeclared = { fallback: undefined };

describe('fallbackFor', () => {
  it('fail: never a stand-in, whatever the step and the workflow declare', () => {
    for (const kind of ['llm', 'tool'] as const) {
      expect(fallbackFor('fail', declared, { kind })).toEqual({ kind: 'fail' });
      expect(fallbackFor('fail', undeclared, { kind })).toEqual({ kind: 'fail' });
    }
  });

  it('degrade: an unavailable tool is passed on, declared fallback or not', () => {
    expect(fallbackFor('degrade', declared, { kind: 'tool' })).toEqual({ kind: 'continue' });
    expect(fallbackFor('degrade', undeclared, { kind: 'tool' })).toEqual({ kind: 'continue' });
  });

  it("degrade: an unavailable LLM is answered with the workflow's declared fallback, and fails without one", () => {
    expect(fallbackFor('degrade', declared, { kind: 'llm' })).toEqual({ kind: 'answer', text: 'We cannot answer right now.' });
    expect(fallbackFor('degrade', undeclared, { kind: 'llm' })).toEqual({ kind: 'fail' });
  });
});

describe('degradedCompletion', () => {
  const steps = [{ id: 'understand' }, { id: 'lookup-order' }, { id: 'reply' }];
  const usage = { inputTokens: 12, outputTokens: 3, cacheCreationInputTokens: 0, cacheReadInputTokens: 0, llmCalls: 1, costUsd: null, byModel: {} };

  it('names each unavailable dependency once and lists, in step order, only the steps with an output', () => {
    const unavailable = [
      { dependency: 'order_lookup', reason: 'timed out' },
      { dependency: 'order_lookup', reason: 'timed out again' },
      { dependency: 'anthropic', reason: 'breaker open' },
    ];
    const done = degradedCompletion({ attempt: 2, steps, outputs: { 'lookup-order': { unavailable: true, reason: 'timed out' }, understand: { text: 'order 42' } }, unavailable, text: 'stand-in', usage });
    expect(done.message).toBe('completed degraded: order_lookup, anthropic unavailable; the answer says so (attempt 2)');
    expect(JSON.parse(done.result)).toEqual({
      text: 'stand-in',
      degraded: true,
      unavailable,
      steps: [
        { id: 'understand', output: { text: 'order 42' } },
        { id: 'lookup-order', output: { unavailable: true, reason: 'timed out' } },
      ],
      usage,
    });
  });

  it('keeps a null text: no step answered with text', () => {
    const done = degradedCompletion({ attempt: 1, steps, outputs: {}, unavailable: [{ dependency: 'anthropic', reason: 'r' }], text: null, usage });
    expect(JSON.parse(done.result)).toMatchObject({ text: null, steps: [] });
  });
});

describe('isDegradedResult', () => {
  it('reads the mark degradedCompletion writes, and nothing else as one', () => {
    const usage = { inputTokens: 0, outputTokens: 0, cacheCreationInputTokens: 0, cacheReadInputTokens: 0, llmCalls: 0, costUsd: null, byModel: {} };
    expect(isDegradedResult(degradedCompletion({ attempt: 1, steps: [], outputs: {}, unavailable: [{ dependency: 'anthropic', reason: 'breaker open' }], text: 'stand-in', usage }).result)).toBe(true);
    expect(isDegradedResult(JSON.stringify({ text: 'a real answer', degraded: false }))).toBe(false);
    for (const other of [null, undefined, '', 'not json', 'null', '"degraded"', '{"degraded":"true"}', '[true]']) expect(isDegradedResult(other), String(other)).toBe(false);
  });
});
