import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import type { DependencyConfig } from '../../../src/config/schema.js';
import { NO_TOKENS, effectiveLimits, estimateInputTokens, inlineWaitBound, paceCharges, providerReport, settleDeltas, usedTokens } from '../../../src/pacing/pacing-policy.js';
import { headerReader } from '../../../src/steps/rate-limit-headers.js';

const config = loadConfig({ env: {} });
const llm = config.dependencies.anthropic!;
const tool = Object.values(config.dependencies).find((d) => d.kind === 'tool')!;
const NOW = Date.parse('2026-12-01T03:00:00Z');
const limited = (dep: DependencyConfig, rateLimit: DependencyConfig['rateLimit']): DependencyConfig => ({ ...dep, rateLimit });

describe('estimateInputTokens', () => {
  it('counts about four characters a token over all the texts, rounding up', () => {
    expect(estimateInputTokens()).toBe(0);
    expect(estimateInputTokens('abcd')).toBe(1);
    expect(estimateInputTokens('abcd', 'e')).toBe(2);
    expect(estimateInputTokens('x'.repeat(4_000))).toBe(1_000);
  });
});

describe('paceCharges', () => {
  it('charges an LLM call in its requests and both token buckets, configured or not, so a reported limit applies', () => {
    expect(paceCharges(limited(llm, undefined), { inputTokens: 100, outputTokens: 512 })).toEqual([
      { bucket: 'requests', perMinute: 0, cost: 1 },
      { bucket: 'input_tokens', perMinute: 0, cost: 100 },
      { bucket: 'output_tokens', perMinute: 0, cost: 512 },
    ]);
  });

  it('passes every configured limit per minute, requests per second included', () => {
    const dep = limited(llm, { requestsPerSecond: 2, requestsPerMinute: 50, inputTokensPerMinute: 40_000, outputTokensPerMinute: 8_000, burstSeconds: 1 });
    expect(paceCharges(dep, { inputTokens: 100, outputTokens: 512 })).toEqual([
      { bucket: 'requests_per_second', perMinute: 120, cost: 1 },
      { bucket: 'requests', perMinute: 50, cost: 1 },
      { bucket: 'input_tokens', perMinute: 40_000, cost: 100 },
      { bucket: 'output_tokens', perMinute: 8_000, cost: 512 },
    ]);
  });

  it('charges a tool only in the request limits it has, and not at all without one', () => {
    expect(paceCharges(limited(tool, undefined), NO_TOKENS)).toEqual([]);
    expect(paceCharges(limited(tool, { requestsPerSecond: 0.5, burstSeconds: 1 }), NO_TOKENS)).toEqual([{ bucket: 'requests_per_second', perMinute: 30, cost: 1 }]);
    expect(paceCharges(limited(tool, { requestsPerMinute: 600, burstSeconds: 1 }), NO_TOKENS)).toEqual([{ bucket: 'requests', perMinute: 600, cost: 1 }]);
  });
});

describe('usedTokens and settleDeltas', () => {
  it('counts cache writes as input and leaves cache reads out', () => {
    expect(usedTokens({ inputTokens: 10, outputTokens: 7, cacheReadTokens: 1_000, cacheCreationTokens: 5 })).toEqual({ inputTokens: 15, outputTokens: 7 });
  });

  it('corrects each token bucket by used minus booked: a refund below, a charge above', () => {
    expect(settleDeltas({ inputTokens: 100, outputTokens: 512 }, { inputTokens: 130, outputTokens: 40 })).toEqual([
      { bucket: 'input_tokens', delta: 30 },
      { bucket: 'output_tokens', delta: -472 },
    ]);
  });
});

describe('inlineWaitBound', () => {
  it('is the configured wait, less when the deadline leaves less, negative when it leaves nothing', () => {
    expect(inlineWaitBound({ maxInlineWaitMs: 1_000, now: NOW, deadline: NOW + 30_000, minCallMs: 500 })).toBe(1_000);
    expect(inlineWaitBound({ maxInlineWaitMs: 1_000, now: NOW, deadline: NOW + 800, minCallMs: 500 })).toBe(300);
    expect(inlineWaitBound({ maxInlineWaitMs: 1_000, now: NOW, deadline: NOW + 200, minCallMs: 500 })).toBe(-300);
  });
});

describe('providerReport', () => {
  const report = (kind: DependencyConfig['kind'], h: Record<string, string> | undefined, status: number | undefined, retryAfterSec?: number, horizonMs = 600_000) =>
    providerReport({ kind, headers: h ? headerReader(h) : undefined, status, retryAfterSec, now: NOW, horizonMs });

  it('maps Anthropic’s requests, input and output limits onto their buckets, not its combined tokens limit', () => {
    const h = { 'anthropic-ratelimit-requests-limit': '50', 'anthropic-ratelimit-tokens-limit': '48000', 'anthropic-ratelimit-input-tokens-limit': '40000', 'anthropic-ratelimit-output-tokens-limit': '8000' };
    expect(report('llm', h, 200)).toEqual({ limits: [{ bucket: 'requests', perMinute: 50, capacity: 0 }, { bucket: 'input_tokens', perMinute: 40_000, capacity: 0 }, { bucket: 'output_tokens', perMinute: 8_000, capacity: 0 }] });
  });

  it('reports the capacity a bucket was seen to hold: what remained plus the request itself, its tokens as they remained', () => {
    const h = { 'anthropic-ratelimit-requests-limit': '900', 'anthropic-ratelimit-requests-remaining': '899', 'anthropic-ratelimit-output-tokens-limit': '8000', 'anthropic-ratelimit-output-tokens-remaining': '7488' };
    expect(report('llm', h, 200).limits).toEqual([
      { bucket: 'requests', perMinute: 900, capacity: 900 },
      { bucket: 'output_tokens', perMinute: 8_000, capacity: 7_488 },
    ]);
  });

  it('reports nothing for absent or malformed headers, so the configured limits apply', () => {
    expect(report('llm', undefined, 200)).toEqual({ limits: [] });
    expect(report('llm', { 'anthropic-ratelimit-requests-limit': 'lots' }, 200)).toEqual({ limits: [] });
  });

  it('holds calls until a used-up limit resets, or a 429’s retry-after ends', () => {
    const reset = new Date(NOW + 2_000).toISOString();
    expect(report('llm', { 'anthropic-ratelimit-requests-remaining': '0', 'anthropic-ratelimit-requests-reset': reset }, 200).notBefore).toBe(NOW + 2_000);
    expect(report('llm', { 'retry-after': '4' }, 429, 4).notBefore).toBe(NOW + 4_000);
  });

  it('takes a tool’s 429 retry-after from the error, and ignores any LLM header a tool might send', () => {
    expect(report('tool', undefined, 429, 2)).toEqual({ limits: [], notBefore: NOW + 2_000 });
    expect(report('tool', undefined, 503, 2)).toEqual({ limits: [] });
    expect(report('tool', undefined, 429, 0)).toEqual({ limits: [] });
    expect(report('tool', { 'anthropic-ratelimit-requests-limit': '5' }, 200)).toEqual({ limits: [] });
  });

  it('holds calls no longer than the horizon', () => {
    expect(report('tool', undefined, 429, 86_400, 60_000).notBefore).toBe(NOW + 60_000);
  });
});

describe('effectiveLimits', () => {
  const dep = limited(llm, { requestsPerMinute: 50, outputTokensPerMinute: 8_000, burstSeconds: 1 });

  it('is the configured limit unless a lower one was observed; an observed one counts where none is configured', () => {
    expect(effectiveLimits(dep, new Map())).toEqual([
      { bucket: 'requests', perMinute: 50, source: 'config' },
      { bucket: 'output_tokens', perMinute: 8_000, source: 'config' },
    ]);
    const observed = new Map([['requests', 40], ['output_tokens', 10_000], ['input_tokens', 30_000]] as const);
    expect(effectiveLimits(dep, observed)).toEqual([
      { bucket: 'requests', perMinute: 40, source: 'observed' },
      { bucket: 'input_tokens', perMinute: 30_000, source: 'observed' },
      { bucket: 'output_tokens', perMinute: 8_000, source: 'config' },
    ]);
  });
});
