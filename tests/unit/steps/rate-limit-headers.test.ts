import { describe, expect, it } from 'vitest';
import { anthropicRateLimits, headerReader, retryAfterMs } from '../../../src/steps/rate-limit-headers.js';

const NOW = Date.parse('2026-12-01T03:00:00Z');
const at = (offsetMs: number) => new Date(NOW + offsetMs).toISOString();
const read = (h: Record<string, string>) => anthropicRateLimits(headerReader(h), 200, NOW);

describe('headerReader', () => {
  it('finds a header whatever the case of its name or of the name asked for, and takes the first of a list', () => {
    const get = headerReader({ 'Retry-After': '3', 'x-list': ['a', 'b'], 'x-none': undefined });
    expect(get('retry-after')).toBe('3');
    expect(get('RETRY-AFTER')).toBe('3');
    expect(get('X-List')).toBe('a');
    expect(get('x-none')).toBeUndefined();
    expect(get('absent')).toBeUndefined();
  });
});

describe('retryAfterMs', () => {
  it.each([
    ['0', 0],
    ['7', 7_000],
    [' 7 ', 7_000],
    ['1.5', 1_500],
    ['120', 120_000],
  ])('reads delay-seconds %j as %i ms', (value, ms) => expect(retryAfterMs(value, NOW)).toBe(ms));

  it('reads an HTTP date as the ms until it, and one already past as 0', () => {
    expect(retryAfterMs('Tue, 01 Dec 2026 03:00:10 GMT', NOW)).toBe(10_000);
    expect(retryAfterMs('Tue, 01 Dec 2026 02:59:00 GMT', NOW)).toBe(0);
  });

  it.each([undefined, null, '', '   ', '-1', '-0.5', 'soon', '1e3', '0x10', 'NaN', 'Infinity', '2026-12-01T03:00:10Z', 'Tue, 01 Dec 2026 03:00:10', 'Tue, 32 Foo 2026 03:00:10 GMT'])(
    'reads %j as absent',
    (value) => expect(retryAfterMs(value, NOW)).toBeUndefined(),
  );
});

describe('anthropicRateLimits', () => {
  it('reads every limit Anthropic reports, by kind', () => {
    expect(
      read({
        'anthropic-ratelimit-requests-limit': '50',
        'anthropic-ratelimit-tokens-limit': '48000',
        'anthropic-ratelimit-input-tokens-limit': '40000',
        'anthropic-ratelimit-output-tokens-limit': '8000',
        'anthropic-ratelimit-requests-remaining': '49',
        'anthropic-ratelimit-output-tokens-remaining': '7488',
      }),
    ).toEqual({ limits: { requests: 50, tokens: 48_000, input_tokens: 40_000, output_tokens: 8_000 }, remaining: { requests: 49, output_tokens: 7_488 } });
  });

  it('reads header names case-insensitively', () => {
    expect(read({ 'Anthropic-RateLimit-Requests-Limit': '50', 'ANTHROPIC-RATELIMIT-OUTPUT-TOKENS-LIMIT': '8000' })).toEqual({ limits: { requests: 50, output_tokens: 8_000 }, remaining: {} });
  });

  it('reports nothing when no rate-limit header is there', () => {
    expect(read({})).toEqual({ limits: {}, remaining: {} });
    expect(read({ 'content-type': 'text/event-stream' })).toEqual({ limits: {}, remaining: {} });
  });

  it.each(['0', '-5', '12.5', 'fifty', '', '1e3', '9007199254740993', ' '])('leaves out a limit of %j', (value) => {
    expect(read({ 'anthropic-ratelimit-requests-limit': value, 'anthropic-ratelimit-input-tokens-limit': '40000' })).toEqual({ limits: { input_tokens: 40_000 }, remaining: {} });
  });

  it('holds calls until a used-up limit has one unit back: its share of the time to its reset', () => {
    // 50 a minute, full again in 60 s: one request is back after 1.2 s
    expect(read({ 'anthropic-ratelimit-requests-limit': '50', 'anthropic-ratelimit-requests-remaining': '0', 'anthropic-ratelimit-requests-reset': at(60_000) })).toEqual({ limits: { requests: 50 }, remaining: { requests: 0 }, notBefore: NOW + 1_200 });
    expect(read({ 'anthropic-ratelimit-requests-limit': '7', 'anthropic-ratelimit-requests-remaining': '0', 'anthropic-ratelimit-requests-reset': at(1_000) }).notBefore).toBe(NOW + 143);
  });

  it('holds calls until the reset itself when the limit is not known', () => {
    expect(read({ 'anthropic-ratelimit-requests-remaining': '0', 'anthropic-ratelimit-requests-reset': at(1_200) })).toEqual({ limits: {}, remaining: { requests: 0 }, notBefore: NOW + 1_200 });
    expect(read({ 'anthropic-ratelimit-requests-limit': 'x', 'anthropic-ratelimit-requests-remaining': '0', 'anthropic-ratelimit-requests-reset': at(1_200) }).notBefore).toBe(NOW + 1_200);
  });

  it('takes the latest of the limits used up', () => {
    const limits = read({
      'anthropic-ratelimit-requests-remaining': '0',
      'anthropic-ratelimit-requests-reset': at(1_000),
      'anthropic-ratelimit-output-tokens-remaining': '0',
      'anthropic-ratelimit-output-tokens-reset': at(5_000),
      'anthropic-ratelimit-input-tokens-remaining': '10',
      'anthropic-ratelimit-input-tokens-reset': at(9_000),
    });
    expect(limits.notBefore).toBe(NOW + 5_000);
    expect(read({ 'anthropic-ratelimit-requests-limit': '10', 'anthropic-ratelimit-requests-remaining': '0', 'anthropic-ratelimit-requests-reset': at(60_000), 'anthropic-ratelimit-output-tokens-limit': '8000', 'anthropic-ratelimit-output-tokens-remaining': '0', 'anthropic-ratelimit-output-tokens-reset': at(60_000) }).notBefore).toBe(NOW + 6_000);
  });

  it('reads a reset with an offset or fractional seconds', () => {
    expect(read({ 'anthropic-ratelimit-tokens-remaining': '0', 'anthropic-ratelimit-tokens-reset': '2026-12-01T04:00:02.500+01:00' }).notBefore).toBe(NOW + 2_500);
  });

  it.each([
    ['remaining left', '5', at(1_000)],
    ['a reset in the past', '0', at(-1_000)],
    ['a reset now', '0', at(0)],
    ['no reset', '0', undefined],
    ['a malformed reset', '0', 'in a minute'],
    ['a reset that is not RFC 3339', '0', 'Tue, 01 Dec 2026 03:00:10 GMT'],
    ['a negative remaining', '-1', at(1_000)],
    ['a non-numeric remaining', 'none', at(1_000)],
  ])('does not hold calls for %s', (_label, remaining, reset) => {
    const h: Record<string, string> = { 'anthropic-ratelimit-requests-remaining': remaining };
    if (reset !== undefined) h['anthropic-ratelimit-requests-reset'] = reset;
    expect(read(h).notBefore).toBeUndefined();
  });

  it('holds calls for a 429’s retry-after, in seconds or as an HTTP date, but not for another status’s', () => {
    expect(anthropicRateLimits(headerReader({ 'retry-after': '3' }), 429, NOW)).toEqual({ limits: {}, remaining: {}, notBefore: NOW + 3_000 });
    expect(anthropicRateLimits(headerReader({ 'Retry-After': 'Tue, 01 Dec 2026 03:00:04 GMT' }), 429, NOW).notBefore).toBe(NOW + 4_000);
    expect(anthropicRateLimits(headerReader({ 'retry-after': '3' }), 529, NOW).notBefore).toBeUndefined();
    expect(anthropicRateLimits(headerReader({ 'retry-after': '3' }), undefined, NOW).notBefore).toBeUndefined();
    expect(anthropicRateLimits(headerReader({ 'retry-after': 'later' }), 429, NOW).notBefore).toBeUndefined();
    expect(anthropicRateLimits(headerReader({ 'retry-after': '0' }), 429, NOW).notBefore).toBeUndefined();
  });

  it('takes the later of a 429’s retry-after and a used-up limit’s reset', () => {
    const h = headerReader({ 'retry-after': '2', 'anthropic-ratelimit-requests-remaining': '0', 'anthropic-ratelimit-requests-reset': at(6_000) });
    expect(anthropicRateLimits(h, 429, NOW).notBefore).toBe(NOW + 6_000);
  });

  it('reads a fetch Headers object', () => {
    const headers = new Headers({ 'Anthropic-Ratelimit-Requests-Limit': '50' });
    expect(anthropicRateLimits((name) => headers.get(name), 200, NOW)).toEqual({ limits: { requests: 50 }, remaining: {} });
  });
});
