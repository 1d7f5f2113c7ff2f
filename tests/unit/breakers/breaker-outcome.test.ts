import Anthropic from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import { breakerOutcomeOf } from '../../../src/breakers/breaker-outcome.js';
import { parseBreakerForceChange, parseBreakerTransition } from '../../../src/breakers/breaker-store.js';
import { toStepError } from '../../../src/steps/llm-call.js';
import { StepError, type StepErrorKind } from '../../../src/steps/step-error.js';

const err = (kind: StepErrorKind, status?: number) => new StepError(kind, 'dep', 'x', false, status);
const body = (type: string) => ({ type: 'error', error: { type, message: 'm' } });

describe('breakerOutcomeOf', () => {
  it('counts a call without an error as a success', () => {
    expect(breakerOutcomeOf(undefined)).toBe('success');
  });

  it.each<[StepErrorKind, number | undefined, string]>([
    ['connect_timeout', undefined, 'failure'],
    ['read_timeout', undefined, 'failure'],
    ['total_timeout', undefined, 'failure'],
    ['connection', undefined, 'failure'],
    ['deadline', undefined, 'released'],
    ['bad_response', undefined, 'success'],
    ['http_status', 408, 'failure'],
    ['http_status', 429, 'failure'],
    ['http_status', 500, 'failure'],
    ['http_status', 502, 'failure'],
    ['http_status', 503, 'failure'],
    ['http_status', 504, 'failure'],
    ['http_status', 529, 'failure'],
    ['http_status', 599, 'failure'],
    ['http_status', 400, 'success'],
    ['http_status', 401, 'success'],
    ['http_status', 403, 'success'],
    ['http_status', 404, 'success'],
    ['http_status', 409, 'success'],
    ['http_status', 413, 'success'],
    ['http_status', 422, 'success'],
    ['http_status', 499, 'success'],
    // no status we could read, or one that is no 4xx: nothing puts it down to our request
    ['http_status', undefined, 'failure'],
    ['http_status', 0, 'failure'],
    ['http_status', 302, 'failure'],
  ])('%s %s → %s', (kind, status, outcome) => {
    expect(breakerOutcomeOf(err(kind, status))).toBe(outcome);
  });

  it('classifies every 4xx and 5xx status', () => {
    for (let s = 400; s < 600; s++) {
      const expected = s >= 500 || s === 408 || s === 429 ? 'failure' : 'success';
      expect(breakerOutcomeOf(err('http_status', s)), String(s)).toBe(expected);
    }
  });
});

describe('breakerOutcomeOf on the Anthropic SDK’s errors (through toStepError)', () => {
  const outcome = (e: unknown) => breakerOutcomeOf(toStepError('anthropic', e));

  it.each<[string, () => unknown, string]>([
    ['RateLimitError with retry-after', () => new Anthropic.RateLimitError(429, body('rate_limit_error'), 'slow down', new Headers({ 'retry-after': '2' })), 'failure'],
    ['RateLimitError without retry-after (spend limit)', () => new Anthropic.RateLimitError(429, body('rate_limit_error'), 'limit', new Headers()), 'failure'],
    ['InternalServerError 500', () => new Anthropic.InternalServerError(500, body('api_error'), 'boom', new Headers()), 'failure'],
    ['529 overloaded (APIError.generate)', () => Anthropic.APIError.generate(529, body('overloaded_error'), 'overloaded', new Headers()), 'failure'],
    ['503 (APIError.generate)', () => Anthropic.APIError.generate(503, body('api_error'), 'unavailable', new Headers()), 'failure'],
    ['408 (APIError.generate)', () => Anthropic.APIError.generate(408, body('timeout_error'), 'timeout', new Headers()), 'failure'],
    ['APIConnectionError', () => new Anthropic.APIConnectionError({ message: 'ECONNRESET' }), 'failure'],
    ['APIConnectionTimeoutError', () => new Anthropic.APIConnectionTimeoutError(), 'failure'],
    ['a status without headers (generate makes it a connection error)', () => Anthropic.APIError.generate(500, undefined, 'x', undefined), 'failure'],
    ['APIUserAbortError', () => new Anthropic.APIUserAbortError(), 'released'],
    ['BadRequestError', () => new Anthropic.BadRequestError(400, body('invalid_request_error'), 'bad', new Headers()), 'success'],
    ['AuthenticationError (APIError.generate)', () => Anthropic.APIError.generate(401, body('authentication_error'), 'who', new Headers()), 'success'],
    ['NotFoundError (APIError.generate)', () => Anthropic.APIError.generate(404, body('not_found_error'), 'what', new Headers()), 'success'],
    ['413 (APIError.generate)', () => Anthropic.APIError.generate(413, body('request_too_large'), 'big', new Headers()), 'success'],
    ['a plain Error (unreadable response)', () => new Error('unexpected end of JSON'), 'success'],
  ])('%s → %s', (_name, make, expected) => {
    expect(outcome(make())).toBe(expected);
  });

  it('sees the kinds and statuses it expects from toStepError', () => {
    expect(toStepError('a', new Anthropic.APIConnectionTimeoutError())).toMatchObject({ kind: 'total_timeout' });
    expect(toStepError('a', new Anthropic.APIUserAbortError())).toMatchObject({ kind: 'deadline' });
    expect(toStepError('a', new Anthropic.APIConnectionError({ message: 'x' }))).toMatchObject({ kind: 'connection' });
    expect(toStepError('a', Anthropic.APIError.generate(529, body('overloaded_error'), 'o', new Headers()))).toMatchObject({ kind: 'http_status', status: 529 });
    expect(toStepError('a', new Error('x'))).toMatchObject({ kind: 'bad_response' });
  });
});

describe('parseBreakerTransition', () => {
  const valid = { dependency: 'anthropic', from: 'closed', to: 'open', at: 1_700_000_000_000, retryAt: 1_700_000_005_000 };
  const text = (patch: Record<string, unknown>) => JSON.stringify({ ...valid, ...patch });

  it('reads each transition the scripts publish', () => {
    expect(parseBreakerTransition(JSON.stringify(valid))).toEqual(valid);
    expect(parseBreakerTransition(text({ from: 'open', to: 'half_open', retryAt: null }))).toEqual({ ...valid, from: 'open', to: 'half_open', retryAt: null });
    expect(parseBreakerTransition(text({ from: 'half_open', to: 'closed', retryAt: null }))).toEqual({ ...valid, from: 'half_open', to: 'closed', retryAt: null });
    expect(parseBreakerTransition(text({ from: 'half_open', to: 'open' }))).toEqual({ ...valid, from: 'half_open' });
  });

  it('ignores fields it does not know', () => {
    expect(parseBreakerTransition(text({ extra: 1 }))).toEqual(valid);
  });

  it.each<[string, string]>([
    ['not JSON', '{"dependency":'],
    ['empty', ''],
    ['null', 'null'],
    ['a number', '42'],
    ['a string', '"open"'],
    ['an array', '[]'],
    ['no dependency', text({ dependency: undefined })],
    ['an empty dependency', text({ dependency: '' })],
    ['a numeric dependency', text({ dependency: 7 })],
    ['an unknown from', text({ from: 'opened' })],
    ['an unknown to', text({ to: 'shut' })],
    ['from equal to to', text({ from: 'open', to: 'open' })],
    ['a textual at', text({ at: '1700000000000' })],
    ['a negative at', text({ at: -1 })],
    ['no at', text({ at: undefined })],
    ['opened without retryAt', text({ retryAt: null })],
    ['opened with a textual retryAt', text({ retryAt: '5' })],
    ['half-open with a retryAt', text({ from: 'open', to: 'half_open' })],
    ['closed without the retryAt field', text({ from: 'half_open', to: 'closed', retryAt: undefined })],
  ])('rejects %s', (_name, payload) => {
    expect(parseBreakerTransition(payload)).toBeUndefined();
  });
});

describe('parseBreakerForceChange', () => {
  const set = { dependency: 'anthropic', forced: 'open', until: 1_700_000_060_000, at: 1_700_000_000_000 };
  const text = (patch: Record<string, unknown>) => JSON.stringify({ ...set, ...patch });

  it('reads a force set and a force cleared as breaker-force.lua publishes them', () => {
    expect(parseBreakerForceChange(JSON.stringify(set))).toEqual(set);
    expect(parseBreakerForceChange(text({ forced: 'closed' }))).toEqual({ ...set, forced: 'closed' });
    expect(parseBreakerForceChange(text({ forced: null, until: null }))).toEqual({ ...set, forced: null, until: null });
  });

  it('is not a transition, and a transition is not a force: the board tells them apart', () => {
    expect(parseBreakerTransition(JSON.stringify(set))).toBeUndefined();
    expect(parseBreakerForceChange(JSON.stringify({ dependency: 'anthropic', from: 'closed', to: 'open', at: 1, retryAt: 2 }))).toBeUndefined();
  });

  it.each<[string, string]>([
    ['not JSON', '{'],
    ['null', 'null'],
    ['no dependency', text({ dependency: undefined })],
    ['an empty dependency', text({ dependency: '' })],
    ['an unknown mode', text({ forced: 'half_open' })],
    ['a force without its end', text({ until: null })],
    ['a textual until', text({ until: '5' })],
    ['a clear with an end', text({ forced: null })],
    ['no at', text({ at: undefined })],
  ])('rejects %s', (_name, payload) => {
    expect(parseBreakerForceChange(payload)).toBeUndefined();
  });
});
