import { describe, expect, it } from 'vitest';
import { budgetCost, budgetRefillPerSec, MIN_TOKEN_SAMPLES, tokenBudgetRefusal, tokenEstimate, tokenPrior } from '../../../src/admission/token-budget.js';
import { parseTokenHash } from '../../../src/admission/service-state.js';
import type { DependencyConfig, WorkflowConfig } from '../../../src/config/schema.js';

const llm = (maxTokens: number) => ({ kind: 'llm', maxTokens }) as unknown as DependencyConfig;
const deps = { small: llm(100), big: llm(1_000), lookup: { kind: 'tool' } as unknown as DependencyConfig };
const wf = (steps: unknown[], tokenPrior?: number) => ({ steps, ...(tokenPrior !== undefined ? { tokenPrior } : {}) }) as unknown as WorkflowConfig;

describe('tokenPrior', () => {
  it('is twice each LLM step’s maxTokens, summed; tool steps cost nothing', () => {
    const steps = [
      { kind: 'llm', dependency: 'small' },
      { kind: 'tool', tool: 'lookup' },
      { kind: 'llm', dependency: 'big' },
      { kind: 'llm', dependency: 'small' },
    ];
    expect(tokenPrior(wf(steps), deps)).toBe(2 * (100 + 1_000 + 100));
  });

  it('counts an agent step as its token bound', () => {
    const steps = [
      { kind: 'llm', dependency: 'small' },
      { kind: 'agent', dependency: 'big', tools: ['lookup'], bounds: { maxTokens: 5_000 } },
    ];
    expect(tokenPrior(wf(steps), deps)).toBe(2 * 100 + 5_000);
  });

  it('a declared tokenPrior wins; a workflow of tools only assumes none', () => {
    expect(tokenPrior(wf([{ kind: 'llm', dependency: 'big' }], 77), deps)).toBe(77);
    expect(tokenPrior(wf([{ kind: 'tool', tool: 'lookup' }]), deps)).toBe(0);
  });
});

describe('tokenEstimate', () => {
  it('is the prior until enough runs were measured, then the moving figure rounded up', () => {
    expect(tokenEstimate(undefined, 800)).toBe(800);
    expect(tokenEstimate({ perRun: 120.1, samples: MIN_TOKEN_SAMPLES - 1 }, 800)).toBe(800);
    expect(tokenEstimate({ perRun: 120.1, samples: MIN_TOKEN_SAMPLES }, 800)).toBe(121);
    expect(tokenEstimate({ perRun: 5_000, samples: 1_000 }, 800)).toBe(5_000);
  });

  it('falls back to the prior on a figure that cannot be a token count', () => {
    for (const perRun of [Number.NaN, Number.POSITIVE_INFINITY, -1]) expect(tokenEstimate({ perRun, samples: 50 }, 800)).toBe(800);
  });
});

describe('budgetCost and refill', () => {
  const budget = { tokensPerMinute: 600, burstTokens: 1_000 };
  it('takes the estimate, capped at the burst so a big run can pass a full bucket', () => {
    expect(budgetCost(300, budget)).toBe(300);
    expect(budgetCost(1_000, budget)).toBe(1_000);
    expect(budgetCost(25_000, budget)).toBe(1_000);
    expect(budgetCost(0, budget)).toBe(0);
  });

  it('refills tokensPerMinute / 60 per second', () => {
    expect(budgetRefillPerSec(budget)).toBe(10);
    expect(budgetRefillPerSec({ tokensPerMinute: 30, burstTokens: 30 })).toBe(0.5);
  });
});

describe('tokenBudgetRefusal', () => {
  it('allowed → no refusal; refused → 429 token_budget_exhausted with the wait rounded up to whole seconds', () => {
    expect(tokenBudgetRefusal({ allowed: true, waitMs: 0 })).toBeUndefined();
    expect(tokenBudgetRefusal({ allowed: false, waitMs: 4_001 })).toEqual({ outcome: 'deferred', reason: 'token_budget_exhausted', retryAfterSec: 5 });
    expect(tokenBudgetRefusal({ allowed: false, waitMs: 10 })).toEqual({ outcome: 'deferred', reason: 'token_budget_exhausted', retryAfterSec: 1 });
  });
});

describe('parseTokenHash', () => {
  it('reads per_run and samples as token-estimate-fold.lua writes them; anything missing or broken → nothing measured', () => {
    expect(parseTokenHash({ per_run: '412.5', samples: '7' })).toEqual({ perRun: 412.5, samples: 7 });
    expect(parseTokenHash({})).toBeUndefined();
    expect(parseTokenHash({ per_run: '412.5' })).toBeUndefined();
    expect(parseTokenHash({ per_run: 'nan', samples: '7' })).toBeUndefined();
  });
});
