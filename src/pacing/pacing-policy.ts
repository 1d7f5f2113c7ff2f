import type { DependencyConfig } from '../config/schema.js';
import type { LlmUsage } from '../steps/llm-call.js';
import { anthropicRateLimits, type HeaderReader } from '../steps/rate-limit-headers.js';
import type { BucketCharge, PaceBucket } from './pacing-store.js';

/** What one call costs in the token buckets: estimated before it, used after it. */
export interface CallTokens {
  inputTokens: number;
  outputTokens: number;
}

export const NO_TOKENS: CallTokens = { inputTokens: 0, outputTokens: 0 };

/**
 * Input tokens of a prompt, estimated before the call from its characters (about four per token
 * in English); the call's settlement corrects the bucket by what its usage reports.
 */
export function estimateInputTokens(...texts: readonly string[]): number {
  return Math.ceil(texts.reduce((n, t) => n + t.length, 0) / 4);
}

/**
 * The buckets one call to `dep` is charged in. An LLM's requests and token buckets are always
 * charged, limit or not, so a limit its provider reports applies without one configured; a tool
 * only in the request limits configured. Empty: nothing paces the dependency.
 */
export function paceCharges(dep: DependencyConfig, tokens: CallTokens): BucketCharge[] {
  const limits = dep.rateLimit;
  const charges: BucketCharge[] = [];
  if (limits?.requestsPerSecond !== undefined) charges.push({ bucket: 'requests_per_second', perMinute: limits.requestsPerSecond * 60, cost: 1 });
  if (dep.kind === 'llm' || limits?.requestsPerMinute !== undefined) charges.push({ bucket: 'requests', perMinute: limits?.requestsPerMinute ?? 0, cost: 1 });
  if (dep.kind === 'llm') {
    charges.push({ bucket: 'input_tokens', perMinute: dep.rateLimit?.inputTokensPerMinute ?? 0, cost: tokens.inputTokens });
    charges.push({ bucket: 'output_tokens', perMinute: dep.rateLimit?.outputTokensPerMinute ?? 0, cost: tokens.outputTokens });
  }
  return charges;
}

/** The buckets that count requests, not tokens: the turns a run may reserve at admission. */
export function isRequestBucket(bucket: PaceBucket): boolean {
  return bucket === 'requests' || bucket === 'requests_per_second';
}

/**
 * The tokens a response used in the provider's limits: its input limit counts uncached input and
 * cache writes, not cache reads (Anthropic's rule for current models); its output limit the output.
 */
export function usedTokens(usage: LlmUsage): CallTokens {
  return { inputTokens: usage.inputTokens + usage.cacheCreationTokens, outputTokens: usage.outputTokens };
}

/** The token buckets' corrections once a call's usage is known: used minus booked. */
export function settleDeltas(booked: CallTokens, used: CallTokens): { bucket: PaceBucket; delta: number }[] {
  return [
    { bucket: 'input_tokens', delta: used.inputTokens - booked.inputTokens },
    { bucket: 'output_tokens', delta: used.outputTokens - booked.outputTokens },
  ];
}

/**
 * The longest a call may wait in the processor for its turn: the configured bound, less than what
 * leaves the call `minCallMs` before the run's deadline (negative: it may not wait at all).
 */
export function inlineWaitBound(opts: { maxInlineWaitMs: number; now: number; deadline: number; minCallMs: number }): number {
  return Math.min(opts.maxInlineWaitMs, opts.deadline - opts.now - opts.minCallMs);
}

/** What a finished call's response can tell of its provider's limits. */
export interface CallResponse {
  headers?: HeaderReader;
  status?: number;
  retryAfterSec?: number;
}

/** What a response told of its provider's limits, as the pacing scripts take it. */
export interface ProviderReport {
  /** `capacity`: the most the bucket was seen to hold, what remained plus this call's request (0: not reported). */
  limits: { bucket: PaceBucket; perMinute: number; capacity: number }[];
  notBefore?: number;
}

/**
 * What a finished call's response says of the provider's limits. An LLM's response headers name
 * Anthropic's limits (its combined `tokens` limit has no bucket of its own: the input and output
 * limits it is made of are reported apart); any dependency's 429 with retry-after holds every call
 * until then. A not-before beyond `horizonMs` from now is cut to it: a provider hint holds calls
 * no longer than an observed limit is trusted.
 */
export function providerReport(opts: CallResponse & { kind: DependencyConfig['kind']; now: number; horizonMs: number }): ProviderReport {
  const { now } = opts;
  const report: ProviderReport = { limits: [] };
  let notBefore: number | undefined;
  if (opts.kind === 'llm' && opts.headers) {
    const seen = anthropicRateLimits(opts.headers, opts.status, now);
    for (const bucket of ['requests', 'input_tokens', 'output_tokens'] as const) {
      const perMinute = seen.limits[bucket];
      const left = seen.remaining[bucket];
      const capacity = left === undefined ? 0 : left + (bucket === 'requests' ? 1 : 0);
      if (perMinute !== undefined) report.limits.push({ bucket, perMinute, capacity });
    }
    notBefore = seen.notBefore;
  }
  if (notBefore === undefined && opts.status === 429 && opts.retryAfterSec !== undefined && opts.retryAfterSec > 0) notBefore = now + opts.retryAfterSec * 1000;
  if (notBefore !== undefined) report.notBefore = Math.min(notBefore, now + opts.horizonMs);
  return report;
}

/** A bucket's per-minute limit and where it comes from, as `sluice_dependency_rate_limit` shows it. */
export interface EffectiveLimit {
  bucket: PaceBucket;
  perMinute: number;
  source: 'config' | 'observed';
}

/** The limits a dependency's calls are paced at: the configured one, or a lower (or the only) observed one. */
export function effectiveLimits(dep: DependencyConfig, observed: ReadonlyMap<PaceBucket, number>): EffectiveLimit[] {
  const out: EffectiveLimit[] = [];
  for (const { bucket, perMinute } of paceCharges(dep, NO_TOKENS)) {
    const seen = observed.get(bucket);
    if (seen !== undefined && (perMinute <= 0 || seen < perMinute)) out.push({ bucket, perMinute: seen, source: 'observed' });
    else if (perMinute > 0) out.push({ bucket, perMinute, source: 'config' });
  }
  return out;
}
