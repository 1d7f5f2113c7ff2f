import { describe, expect, it } from 'vitest';
import { SluiceHttpError, SluiceRefusal, failureOf, parseRetryAfter } from '../../../src/client/errors.js';

const NOW = Date.parse('2026-01-01T00:00:00Z');

describe('parseRetryAfter', () => {
  it('reads delay-seconds and an HTTP date, and nothing else', () => {
    expect(parseRetryAfter(' 3 ', NOW)).toBe(3);
    expect(parseRetryAfter('Thu, 01 Jan 2026 00:00:04 GMT', NOW)).toBe(4);
    expect(parseRetryAfter('Wed, 31 Dec 2025 23:59:00 GMT', NOW)).toBe(0);
    for (const junk of [null, '', '1.5', '-1', 'soon']) expect(parseRetryAfter(junk, NOW)).toBeUndefined();
  });
});

describe('failureOf', () => {
  const problemHeaders = (retryAfter?: string) => new Headers({ 'content-type': 'application/problem+json; charset=utf-8', ...(retryAfter ? { 'retry-after': retryAfter } : {}) });

  it('reads a problem document whatever members it lacks', () => {
    const refusal = failureOf(500, problemHeaders(), '{}', NOW);
    expect(refusal).toBeInstanceOf(SluiceRefusal);
    expect(refusal).toMatchObject({ status: 500, code: 'http_500', title: 'HTTP 500', retryable: false, retryAfterSec: undefined, requestId: undefined, errors: [] });
  });

  it('never waits less than either Retry-After says', () => {
    expect(failureOf(429, problemHeaders('5'), '{"code":"rate_limited","retryAfterSec":2}', NOW)).toMatchObject({ retryAfterSec: 5 });
    expect(failureOf(429, problemHeaders(), '{"code":"rate_limited","retryAfterSec":2}', NOW)).toMatchObject({ retryAfterSec: 2 });
    expect(failureOf(429, problemHeaders('2'), '{"code":"rate_limited","retryAfterSec":"x"}', NOW)).toMatchObject({ retryAfterSec: 2 });
  });

  it('keeps a body that is not a problem document as an HTTP error, cut short', () => {
    for (const [type, body] of [['application/problem+json', 'not json'], ['application/problem+json', '[1]'], ['text/html', 'x'.repeat(20_000)]] as const) {
      const err = failureOf(502, new Headers({ 'content-type': type }), body, NOW);
      expect(err).not.toBeInstanceOf(SluiceRefusal);
      expect(err).toBeInstanceOf(SluiceHttpError);
      expect(err.body.length).toBeLessThanOrEqual(16_384);
    }
  });
});
