import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { SluiceConfig, StepConfig } from '../../../src/config/schema.js';
import { TYPICAL_BYTES_PER_TOKEN, countLlmResponse, countedUsage, runUsage, stepUsage } from '../../../src/execution/llm-usage.js';
import { MAX_BYTES_PER_TOKEN } from '../../../src/steps/llm-call.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { metricValue } from '../../support/metric-value.js';

const llmDep = (model: string) => ({ kind: 'llm', model }) as SluiceConfig['dependencies'][string];
const config = {
  dependencies: { anthropic: llmDep('claude-sonnet-4-6'), cheap: llmDep('claude-haiku-4-5'), other: llmDep('gpt-x'), lookup: { kind: 'tool' } as SluiceConfig['dependencies'][string] },
  pricing: {
    models: {
      'claude-sonnet-4': { inputPerMillionTokens: 3, outputPerMillionTokens: 15, cacheWritePerMillionTokens: 3.75, cacheReadPerMillionTokens: 0.3 },
      'claude-haiku-4-5': { inputPerMillionTokens: 1, outputPerMillionTokens: 5 },
    },
  },
};
const step = (id: string, dependency: string): StepConfig => ({ id, kind: 'llm', dependency, system: 's' });
const tool: StepConfig = { id: 'look', kind: 'tool', tool: 'lookup' };
const usage = (inputTokens: number, outputTokens: number, cacheCreationInputTokens = 0, cacheReadInputTokens = 0) => ({ inputTokens, outputTokens, cacheCreationInputTokens, cacheReadInputTokens });

describe('stepUsage', () => {
  it('names the response\'s four counts as the Messages API does', () => {
    expect(stepUsage({ inputTokens: 1, outputTokens: 2, cacheCreationTokens: 3, cacheReadTokens: 4 })).toEqual(usage(1, 2, 3, 4));
  });
});

describe('countedUsage', () => {
  const reported = (outputTokens: number) => ({ inputTokens: 7, outputTokens, cacheReadTokens: 3, cacheCreationTokens: 2 });

  it('keeps the provider\'s count while the bytes fit it at 16 bytes a token', () => {
    expect(countedUsage(reported(512), 8_192)).toEqual(reported(512));
    expect(countedUsage(reported(1), 16)).toEqual(reported(1));
    expect(countedUsage(reported(0), 0)).toEqual(reported(0));
  });

  it('counts the output at 4 bytes a token when the bytes are more than the count could carry, leaving the other counts', () => {
    // The case, within the answer's bound: 1 output token reported for 24 KiB.
    expect(countedUsage(reported(1), 24_576)).toEqual({ ...reported(6_144), inputTokens: 7, cacheReadTokens: 3, cacheCreationTokens: 2 });
    expect(countedUsage(reported(1), 17)).toEqual(reported(5));
    // No usage reported at all reads as 0.
    expect(countedUsage(reported(0), 1)).toEqual(reported(1));
  });

  it('never counts less than reported, nor less than the bytes can be, and replaces only an implausible count', () => {
    fc.assert(
      fc.property(fc.nat({ max: 10_000_000 }), fc.nat({ max: 100_000_000 }), (outputTokens, bytes) => {
        const counted = countedUsage(reported(outputTokens), bytes).outputTokens;
        expect(counted).toBeGreaterThanOrEqual(outputTokens);
        expect(counted).toBeGreaterThanOrEqual(Math.ceil(bytes / MAX_BYTES_PER_TOKEN));
        const plausible = outputTokens * MAX_BYTES_PER_TOKEN >= bytes;
        expect(counted).toBe(plausible ? outputTokens : Math.ceil(bytes / TYPICAL_BYTES_PER_TOKEN));
      }),
    );
  });
});

describe('runUsage', () => {
  it('sums the LLM steps\' outputs, priced by model, in total and by model', () => {
    const steps = [step('a', 'anthropic'), tool, step('b', 'anthropic'), step('c', 'cheap')];
    const outputs = {
      a: { text: 'x', model: 'claude-sonnet-4-6', usage: usage(1_000, 200, 2_000, 10_000) },
      look: { usage: usage(999, 999) },
      b: { text: 'y', model: 'claude-sonnet-4-6', usage: usage(500, 100) },
      c: { text: 'z', model: 'claude-haiku-4-5', usage: usage(100, 10) },
    };
    const sonnetUsd = (1_500 * 3 + 300 * 15 + 2_000 * 3.75 + 10_000 * 0.3) / 1e6;
    const haikuUsd = (100 * 1 + 10 * 5) / 1e6;
    expect(runUsage(steps, outputs, config)).toEqual({
      ...usage(1_600, 310, 2_000, 10_000),
      llmCalls: 3,
      costUsd: Math.round((sonnetUsd + haikuUsd) * 1e8) / 1e8,
      byModel: {
        'claude-sonnet-4-6': { ...usage(1_500, 300, 2_000, 10_000), llmCalls: 2, costUsd: Math.round(sonnetUsd * 1e8) / 1e8 },
        'claude-haiku-4-5': { ...usage(100, 10), llmCalls: 1, costUsd: 0.00015 },
      },
    });
  });

  it('leaves the cost unknown (null), not 0, once a call\'s model has no price; its tokens still count', () => {
    const steps = [step('a', 'anthropic'), step('b', 'other')];
    const outputs = { a: { model: 'claude-sonnet-4-6', usage: usage(1_000_000, 0) }, b: { model: 'gpt-x', usage: usage(10, 1) } };
    const u = runUsage(steps, outputs, config);
    expect(u).toMatchObject({ inputTokens: 1_000_010, outputTokens: 1, llmCalls: 2, costUsd: null });
    expect(u.byModel['claude-sonnet-4-6']!.costUsd).toBe(3);
    expect(u.byModel['gpt-x']!.costUsd).toBeNull();
  });

  it('prices and files a model the config does not name under the dependency\'s model', () => {
    const u = runUsage([step('a', 'anthropic')], { a: { model: 'claude-sonnet-4-6-20260101', usage: usage(1_000_000, 0) } }, config);
    expect(Object.keys(u.byModel)).toEqual(['claude-sonnet-4-6']);
    expect(u.costUsd).toBe(3);
  });

  it('skips stand-ins and outputs without usage (journaled by an older version); absent cache counts are 0', () => {
    const steps = [step('a', 'anthropic'), step('b', 'anthropic'), step('c', 'anthropic'), step('d', 'anthropic')];
    const outputs = { a: { unavailable: true, reason: 'breaker open' }, b: { text: 'old' }, d: { model: 'claude-sonnet-4-6', usage: { inputTokens: 10, outputTokens: -5 } } };
    expect(runUsage(steps, outputs, config)).toEqual({ ...usage(10, 0), llmCalls: 1, costUsd: 0.00003, byModel: { 'claude-sonnet-4-6': { ...usage(10, 0), llmCalls: 1, costUsd: 0.00003 } } });
  });

  const agentStep = (id: string, dependency: string): StepConfig => ({ id, kind: 'agent', dependency, system: 's', tools: ['lookup'], bounds: { maxTurns: 8, maxToolCalls: 20, maxTokens: 100_000, maxParallelTools: 4, deadlineShare: 1 } });

  it('counts each answered turn of an agent step as one call, priced by its model, beside the LLM steps', () => {
    const steps = [step('a', 'anthropic'), agentStep('agent', 'anthropic')];
    const outputs = {
      a: { text: 'x', model: 'claude-sonnet-4-6', usage: usage(1_000, 100) },
      agent: {
        text: 'done',
        // The agent's own model and usage fields, if any, are not a call: only its turns are.
        model: 'claude-sonnet-4-6',
        usage: usage(999, 999),
        agent: { turns: 3, calls: [{ model: 'claude-sonnet-4-6', usage: usage(2_000, 200) }, { model: 'claude-haiku-4-5', usage: usage(1_000, 100) }, { model: 'claude-sonnet-4-6', usage: usage(3_000, 300, 0, 1_000) }] },
      },
    };
    const sonnetUsd = (6_000 * 3 + 600 * 15 + 1_000 * 0.3) / 1e6;
    const haikuUsd = (1_000 * 1 + 100 * 5) / 1e6;
    expect(runUsage(steps, outputs, config)).toEqual({
      ...usage(7_000, 700, 0, 1_000),
      llmCalls: 4,
      costUsd: Math.round((sonnetUsd + haikuUsd) * 1e8) / 1e8,
      byModel: {
        'claude-sonnet-4-6': { ...usage(6_000, 600, 0, 1_000), llmCalls: 3, costUsd: Math.round(sonnetUsd * 1e8) / 1e8 },
        'claude-haiku-4-5': { ...usage(1_000, 100), llmCalls: 1, costUsd: haikuUsd },
      },
    });
  });

  it('counts nothing for an agent stand-in, an agent output without calls, or an agent on a non-LLM dependency', () => {
    const steps = [agentStep('a', 'anthropic'), agentStep('b', 'anthropic'), agentStep('c', 'anthropic'), agentStep('d', 'lookup')];
    const outputs = { a: { unavailable: true, reason: 'breaker open' }, b: { text: 'x', agent: { turns: 1 } }, c: { text: 'x', agent: { calls: 'not a list' } }, d: { agent: { calls: [{ model: 'claude-sonnet-4-6', usage: usage(1, 1) }] } } };
    expect(runUsage(steps, outputs, config)).toEqual({ ...usage(0, 0), llmCalls: 0, costUsd: 0, byModel: {} });
  });

  it('counts a stopped agent\'s turns, whose transcript is all the run produced', () => {
    const outputs = { agent: { text: null, agent: { stoppedBy: 'maxTurns', calls: [{ model: 'claude-sonnet-4-6', usage: usage(10, 1) }, { model: 'claude-sonnet-4-6', usage: usage(10, 1) }] } } };
    expect(runUsage([agentStep('agent', 'anthropic')], outputs, config)).toMatchObject({ inputTokens: 20, outputTokens: 2, llmCalls: 2 });
  });

  it('is zero, at a known cost of 0, for a run without LLM answers', () => {
    expect(runUsage([tool], { look: {} }, config)).toEqual({ ...usage(0, 0), llmCalls: 0, costUsd: 0, byModel: {} });
  });
});

describe('countLlmResponse', () => {
  const labels = { tenant: 'tenant-a', workflow: 'wf' };

  it('counts tokens by kind and the cost of a priced model', async () => {
    const metrics = createMetrics();
    countLlmResponse(metrics, config, labels, { model: 'claude-sonnet-4-6' }, { model: 'claude-sonnet-4-6', usage: { inputTokens: 1_000_000, outputTokens: 100_000, cacheCreationTokens: 0, cacheReadTokens: 0 } });
    const model = { ...labels, model: 'claude-sonnet-4-6' };
    expect(await metricValue(metrics.llmTokens, { ...model, kind: 'input' })).toBe(1_000_000);
    expect(await metricValue(metrics.llmCost, model)).toBeCloseTo(4.5, 9);
    expect((await metrics.llmUnpricedTokens.get()).values).toEqual([]);
  });

  it('counts an unpriced model\'s tokens as unpriced, and no cost', async () => {
    const metrics = createMetrics();
    countLlmResponse(metrics, config, labels, { model: 'gpt-x' }, { model: 'gpt-x', usage: { inputTokens: 10, outputTokens: 5, cacheCreationTokens: 2, cacheReadTokens: 3 } });
    expect(await metricValue(metrics.llmUnpricedTokens, { ...labels, model: 'gpt-x' })).toBe(20);
    expect((await metrics.llmCost.get()).values).toEqual([]);
  });
});
