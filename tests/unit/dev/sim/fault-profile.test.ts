import { describe, expect, it } from 'vitest';
import {
  MAX_ANSWER_BYTES,
  MAX_LATENCY_MS,
  MAX_REPORTED_OUTPUT_TOKENS,
  MAX_RATE_LIMIT,
  MAX_RETRY_AFTER_SEC,
  ZERO_PROFILE,
  applyFaultPatch,
  decideOutcome,
  parseFaultUpdate,
  parseSimulateFailure,
  type FaultProfile,
} from '../../../../src/dev/sim/fault-profile.js';

const TARGETS = ['anthropic', 'order-lookup'];

function profile(fields: Partial<FaultProfile> = {}): FaultProfile {
  return { ...ZERO_PROFILE, ...fields };
}

/** Returns the given values in order and fails the test if asked for more. */
function sequence(...values: number[]): () => number {
  return () => {
    const next = values.shift();
    if (next === undefined) throw new Error('random drawn more often than expected');
    return next;
  };
}

const never = sequence();

function fieldsOf(body: unknown): string[] {
  const result = parseFaultUpdate(body, TARGETS);
  return result.ok ? [] : result.errors.map((error) => error.field);
}

describe('parseFaultUpdate', () => {
  it('accepts a full body and returns only the fields that were set', () => {
    expect(parseFaultUpdate({ target: 'anthropic', latencyMs: 10 }, TARGETS)).toEqual({
      ok: true,
      value: { target: 'anthropic', patch: { latencyMs: 10 } },
    });
    expect(
      parseFaultUpdate(
        { target: 'order-lookup', latencyMs: 0, jitterMs: MAX_LATENCY_MS, errorStatus: 529, errorRate: 0.25, retryAfterSec: MAX_RETRY_AFTER_SEC, hang: false },
        TARGETS,
      ),
    ).toEqual({
      ok: true,
      value: {
        target: 'order-lookup',
        patch: { latencyMs: 0, jitterMs: MAX_LATENCY_MS, errorStatus: 529, errorRate: 0.25, retryAfterSec: MAX_RETRY_AFTER_SEC, hang: false },
      },
    });
  });

  it.each([null, [], 'anthropic', 42])('rejects a body that is not an object: %j', (body) => {
    expect(parseFaultUpdate(body, TARGETS)).toEqual({ ok: false, errors: [{ field: 'body', message: 'must be a JSON object' }] });
  });

  it.each([
    [{}, 'target'],
    [{ target: '' }, 'target'],
    [{ target: 7 }, 'target'],
    [{ target: 'openai' }, 'target'],
  ])('rejects a missing or unknown target: %j', (body, field) => {
    expect(fieldsOf(body)).toEqual([field]);
  });

  it('names the known targets when the target is unknown', () => {
    const result = parseFaultUpdate({ target: 'openai' }, TARGETS);
    expect(result.ok ? '' : result.errors[0]?.message).toBe('must be one of: anthropic, order-lookup');
  });

  it('rejects unknown fields by name', () => {
    expect(fieldsOf({ target: 'anthropic', latency: 5 })).toEqual(['latency']);
  });

  it.each([
    ['latencyMs', -1],
    ['latencyMs', 1.5],
    ['latencyMs', MAX_LATENCY_MS + 1],
    ['latencyMs', '10'],
    ['jitterMs', -1],
    ['jitterMs', MAX_LATENCY_MS + 1],
    ['retryAfterSec', 0.5],
    ['retryAfterSec', MAX_RETRY_AFTER_SEC + 1],
    ['retryAfterSec', null],
    ['errorStatus', 404],
    ['errorStatus', '429'],
    ['hang', 'true'],
    ['hang', 1],
  ])('rejects %s = %j', (field, value) => {
    expect(fieldsOf({ target: 'anthropic', [field]: value })).toEqual([field]);
  });

  it.each([-0.1, 1.1, '0.5', Number.NaN])('rejects errorRate %j', (errorRate) => {
    expect(fieldsOf({ target: 'anthropic', errorStatus: 500, errorRate })).toEqual(['errorRate']);
  });

  it('accepts an answer size and a reported output count for the anthropic target, within their bounds', () => {
    expect(parseFaultUpdate({ target: 'anthropic', answerBytes: MAX_ANSWER_BYTES, reportedOutputTokens: 1 }, TARGETS)).toEqual({
      ok: true,
      value: { target: 'anthropic', patch: { answerBytes: MAX_ANSWER_BYTES, reportedOutputTokens: 1 } },
    });
    expect(fieldsOf({ target: 'anthropic', answerBytes: MAX_ANSWER_BYTES + 1, reportedOutputTokens: MAX_REPORTED_OUTPUT_TOKENS + 1 })).toEqual(['answerBytes', 'reportedOutputTokens']);
    expect(fieldsOf({ target: 'anthropic', answerBytes: -1, reportedOutputTokens: 0.5 })).toEqual(['answerBytes', 'reportedOutputTokens']);
  });

  it('refuses an answer size or a reported output count for a tool', () => {
    const result = parseFaultUpdate({ target: 'order-lookup', answerBytes: 10, reportedOutputTokens: 1 }, TARGETS);
    expect(result).toEqual({
      ok: false,
      errors: [
        { field: 'answerBytes', message: 'is a fault of the anthropic target only' },
        { field: 'reportedOutputTokens', message: 'is a fault of the anthropic target only' },
      ],
    });
  });

  it('treats an error status without a rate as "always"', () => {
    expect(parseFaultUpdate({ target: 'anthropic', errorStatus: 429 }, TARGETS)).toEqual({
      ok: true,
      value: { target: 'anthropic', patch: { errorStatus: 429, errorRate: 1 } },
    });
  });

  it('requires an error status when the rate is above 0, but not when it is 0', () => {
    expect(fieldsOf({ target: 'anthropic', errorRate: 0.5 })).toEqual(['errorStatus']);
    expect(parseFaultUpdate({ target: 'anthropic', errorRate: 0 }, TARGETS)).toEqual({
      ok: true,
      value: { target: 'anthropic', patch: { errorRate: 0 } },
    });
  });

  it('does not ask for an error status because of a rate that is itself invalid', () => {
    expect(fieldsOf({ target: 'anthropic', errorRate: 2 })).toEqual(['errorRate']);
  });

  it('reports every problem at once', () => {
    expect(fieldsOf({ target: 'nope', latencyMs: -5, hang: 'no', extra: 1 })).toEqual(['extra', 'target', 'latencyMs', 'hang']);
  });
});

describe('parseFaultUpdate: rateLimit', () => {
  function errorsOf(body: unknown): { field: string; message: string }[] {
    const result = parseFaultUpdate(body, TARGETS);
    return result.ok ? [] : result.errors;
  }

  it("accepts any subset of the anthropic target's per-minute limits, with other fields", () => {
    expect(parseFaultUpdate({ target: 'anthropic', rateLimit: { requestsPerMinute: 50, inputTokensPerMinute: 40_000, outputTokensPerMinute: 8_000 } }, TARGETS)).toEqual({
      ok: true,
      value: { target: 'anthropic', patch: { rateLimit: { requestsPerMinute: 50, inputTokensPerMinute: 40_000, outputTokensPerMinute: 8_000 } } },
    });
    expect(parseFaultUpdate({ target: 'anthropic', latencyMs: 5, rateLimit: { outputTokensPerMinute: 1.5 } }, TARGETS)).toEqual({
      ok: true,
      value: { target: 'anthropic', patch: { latencyMs: 5, rateLimit: { outputTokensPerMinute: 1.5 } } },
    });
  });

  it('accepts a request limit per second or per minute for a tool', () => {
    expect(parseFaultUpdate({ target: 'order-lookup', rateLimit: { requestsPerSecond: 5 } }, TARGETS)).toMatchObject({ ok: true, value: { patch: { rateLimit: { requestsPerSecond: 5 } } } });
    expect(parseFaultUpdate({ target: 'order-lookup', rateLimit: { requestsPerMinute: 30 } }, TARGETS)).toMatchObject({ ok: true, value: { patch: { rateLimit: { requestsPerMinute: 30 } } } });
  });

  it('takes null as "remove the limits"', () => {
    expect(parseFaultUpdate({ target: 'anthropic', rateLimit: null }, TARGETS)).toEqual({ ok: true, value: { target: 'anthropic', patch: { rateLimit: null } } });
  });

  it.each([0, -1, 0.5, MAX_RATE_LIMIT + 1, '50', null, Number.NaN, Number.POSITIVE_INFINITY, true])('rejects the limit %j, naming the field', (value) => {
    expect(errorsOf({ target: 'anthropic', rateLimit: { requestsPerMinute: value } })).toEqual([
      { field: 'rateLimit.requestsPerMinute', message: `must be a number from 1 to ${MAX_RATE_LIMIT}` },
    ]);
  });

  it.each([5, 'fast', [], true])('rejects a rateLimit that is not an object or null: %j', (rateLimit) => {
    expect(errorsOf({ target: 'anthropic', rateLimit })).toEqual([{ field: 'rateLimit', message: 'must be an object of limits, or null to remove them' }]);
  });

  it('rejects unknown keys, an empty object, and limits that do not fit the target', () => {
    expect(errorsOf({ target: 'anthropic', rateLimit: { requestsPerHour: 5, tokensPerMinute: 10 } })).toEqual([
      { field: 'rateLimit.requestsPerHour', message: 'is not a known field' },
      { field: 'rateLimit.tokensPerMinute', message: 'is not a known field' },
    ]);
    expect(errorsOf({ target: 'anthropic', rateLimit: {} })).toEqual([{ field: 'rateLimit', message: 'must set at least one limit (null removes them)' }]);
    expect(errorsOf({ target: 'anthropic', rateLimit: { requestsPerSecond: 5 } })).toEqual([
      { field: 'rateLimit.requestsPerSecond', message: 'is not a limit of the anthropic target (requestsPerMinute, inputTokensPerMinute, outputTokensPerMinute)' },
    ]);
    expect(errorsOf({ target: 'order-lookup', rateLimit: { requestsPerSecond: 5, inputTokensPerMinute: 100, outputTokensPerMinute: 100 } })).toEqual([
      { field: 'rateLimit.inputTokensPerMinute', message: 'is not a limit of a tool (requestsPerSecond or requestsPerMinute)' },
      { field: 'rateLimit.outputTokensPerMinute', message: 'is not a limit of a tool (requestsPerSecond or requestsPerMinute)' },
    ]);
    expect(errorsOf({ target: 'order-lookup', rateLimit: { requestsPerSecond: 5, requestsPerMinute: 100 } })).toEqual([
      { field: 'rateLimit', message: 'takes requestsPerSecond or requestsPerMinute, not both' },
    ]);
  });

  it('checks only the values when the target itself is invalid', () => {
    expect(fieldsOf({ target: 'openai', rateLimit: { requestsPerSecond: 5, outputTokensPerMinute: 0 } })).toEqual(['target', 'rateLimit.outputTokensPerMinute']);
  });
});

describe('applyFaultPatch', () => {
  const limited = profile({ latencyMs: 30, rateLimit: { requestsPerMinute: 50 } });

  it('lays the patch over the baseline, keeping the baseline limit when the patch names none', () => {
    expect(applyFaultPatch(limited, { errorStatus: 529, errorRate: 1 })).toEqual({ ...limited, errorStatus: 529, errorRate: 1 });
    expect(applyFaultPatch(ZERO_PROFILE, { latencyMs: 5 })).toEqual(profile({ latencyMs: 5 }));
  });

  it('replaces the limit as a whole, and removes it for null', () => {
    expect(applyFaultPatch(limited, { rateLimit: { inputTokensPerMinute: 1_000 } })).toEqual({ ...limited, rateLimit: { inputTokensPerMinute: 1_000 } });
    const cleared = applyFaultPatch(limited, { rateLimit: null });
    expect(cleared).toEqual(profile({ latencyMs: 30 }));
    expect(cleared).not.toHaveProperty('rateLimit');
  });
});

describe('parseSimulateFailure', () => {
  it.each([
    ['429', profile({ errorStatus: 429, errorRate: 1 })],
    ['500', profile({ errorStatus: 500, errorRate: 1 })],
    ['529', profile({ errorStatus: 529, errorRate: 1 })],
    ['hang', profile({ hang: true })],
    [' HANG ', profile({ hang: true })],
    ['slow=1500', profile({ latencyMs: 1500 })],
    ['slow=0', profile()],
    ['429,retry-after=3', profile({ errorStatus: 429, errorRate: 1, retryAfterSec: 3 })],
    [' 529 , slow=200 ', profile({ errorStatus: 529, errorRate: 1, latencyMs: 200 })],
    ['retry-after=0,500', profile({ errorStatus: 500, errorRate: 1, retryAfterSec: 0 })],
  ])('parses %j', (header, expected) => {
    expect(parseSimulateFailure(header)).toEqual({ ok: true, value: expected });
  });

  it.each([
    ['', 'unknown token ""'],
    ['404', 'unknown token "404"'],
    ['429,', 'unknown token ""'],
    ['hang=1', 'unknown token "hang=1"'],
    ['429=1', 'unknown token "429=1"'],
    ['timeout', 'unknown token "timeout"'],
    ['slow', '"slow" needs an integer'],
    ['slow=', '"slow" needs an integer'],
    ['slow=-1', '"slow" needs an integer'],
    ['slow=1.5', '"slow" needs an integer'],
    ['slow=abc', '"slow" needs an integer'],
    ['slow=1=2', '"slow" needs an integer'],
    [`slow=${MAX_LATENCY_MS + 1}`, '"slow" needs an integer'],
    [`429,retry-after=${MAX_RETRY_AFTER_SEC + 1}`, '"retry-after" needs an integer'],
    ['retry-after=3', '"retry-after" needs an error status'],
    ['429,500', '"status" given more than once'],
    ['429,429', '"status" given more than once'],
    ['slow=1,slow=2', '"slow" given more than once'],
    ['hang,429', '"hang" cannot be combined'],
    ['slow=10,hang', '"hang" cannot be combined'],
  ])('rejects %j', (header, message) => {
    const result = parseSimulateFailure(header);
    expect(result.ok).toBe(false);
    expect(result.ok ? '' : result.message).toContain(message);
  });
});

describe('decideOutcome', () => {
  it('hangs without drawing a random number', () => {
    expect(decideOutcome(profile({ hang: true, latencyMs: 5, errorStatus: 500, errorRate: 1 }), undefined, never)).toEqual({ kind: 'hang' });
  });

  it('answers after exactly the latency when there is no jitter and no error', () => {
    expect(decideOutcome(profile({ latencyMs: 250 }), undefined, never)).toEqual({ kind: 'ok', delayMs: 250 });
    expect(decideOutcome(profile(), undefined, never)).toEqual({ kind: 'ok', delayMs: 0 });
  });

  it('never fails at errorRate 0 and always fails at errorRate 1, without a roll', () => {
    expect(decideOutcome(profile({ errorStatus: 500, errorRate: 0 }), undefined, never)).toEqual({ kind: 'ok', delayMs: 0 });
    expect(decideOutcome(profile({ errorStatus: 500, errorRate: 1 }), undefined, never)).toEqual({ kind: 'error', status: 500, delayMs: 0 });
  });

  it('does not fail without an error status, whatever the rate', () => {
    expect(decideOutcome(profile({ errorRate: 1 }), undefined, never)).toEqual({ kind: 'ok', delayMs: 0 });
  });

  it('fails when the roll is below the rate and succeeds at or above it', () => {
    const flaky = profile({ errorStatus: 529, errorRate: 0.3 });
    expect(decideOutcome(flaky, undefined, sequence(0))).toEqual({ kind: 'error', status: 529, delayMs: 0 });
    expect(decideOutcome(flaky, undefined, sequence(0.2999))).toEqual({ kind: 'error', status: 529, delayMs: 0 });
    expect(decideOutcome(flaky, undefined, sequence(0.3))).toEqual({ kind: 'ok', delayMs: 0 });
    expect(decideOutcome(flaky, undefined, sequence(0.9999))).toEqual({ kind: 'ok', delayMs: 0 });
  });

  it('gives 429 a default retry-after of 1 s and keeps an explicit one', () => {
    expect(decideOutcome(profile({ errorStatus: 429, errorRate: 1 }), undefined, never)).toEqual({
      kind: 'error',
      status: 429,
      delayMs: 0,
      retryAfterSec: 1,
    });
    expect(decideOutcome(profile({ errorStatus: 429, errorRate: 1, retryAfterSec: 0 }), undefined, never)).toMatchObject({ retryAfterSec: 0 });
    expect(decideOutcome(profile({ errorStatus: 529, errorRate: 1, retryAfterSec: 4 }), undefined, never)).toEqual({
      kind: 'error',
      status: 529,
      delayMs: 0,
      retryAfterSec: 4,
    });
  });

  it('omits retry-after for 500 and 529 unless configured', () => {
    expect(decideOutcome(profile({ errorStatus: 529, errorRate: 1 }), undefined, never)).not.toHaveProperty('retryAfterSec');
    expect(decideOutcome(profile({ errorStatus: 500, errorRate: 1 }), undefined, never)).not.toHaveProperty('retryAfterSec');
  });

  it('keeps jitter within latency .. latency + jitterMs', () => {
    const jittery = profile({ latencyMs: 100, jitterMs: 10 });
    expect(decideOutcome(jittery, undefined, sequence(0))).toEqual({ kind: 'ok', delayMs: 100 });
    expect(decideOutcome(jittery, undefined, sequence(0.5))).toEqual({ kind: 'ok', delayMs: 105 });
    expect(decideOutcome(jittery, undefined, sequence(0.999999))).toEqual({ kind: 'ok', delayMs: 110 });
    // A broken source returning 1 must still respect the upper bound.
    expect(decideOutcome(jittery, undefined, sequence(1))).toEqual({ kind: 'ok', delayMs: 110 });
  });

  it('rolls for the error first, then for jitter, and delays errors too', () => {
    const both = profile({ latencyMs: 50, jitterMs: 100, errorStatus: 500, errorRate: 0.5 });
    expect(decideOutcome(both, undefined, sequence(0.4, 0.25))).toEqual({ kind: 'error', status: 500, delayMs: 75 });
    expect(decideOutcome(both, undefined, sequence(0.6, 0))).toEqual({ kind: 'ok', delayMs: 50 });
  });

  it('lets an override replace the profile entirely, without randomness', () => {
    const broken = profile({ hang: true });
    const erroring = profile({ latencyMs: 1000, errorStatus: 500, errorRate: 1 });
    expect(decideOutcome(broken, profile({ latencyMs: 20 }), never)).toEqual({ kind: 'ok', delayMs: 20 });
    expect(decideOutcome(erroring, profile(), never)).toEqual({ kind: 'ok', delayMs: 0 });
    expect(decideOutcome(erroring, profile({ errorStatus: 429, errorRate: 1 }), never)).toEqual({
      kind: 'error',
      status: 429,
      delayMs: 0,
      retryAfterSec: 1,
    });
    expect(decideOutcome(profile(), profile({ hang: true }), never)).toEqual({ kind: 'hang' });
  });

  it('combines header tokens into one outcome', () => {
    const parsed = parseSimulateFailure('529,slow=30,retry-after=2');
    if (!parsed.ok) throw new Error(parsed.message);
    expect(decideOutcome(profile(), parsed.value, never)).toEqual({ kind: 'error', status: 529, delayMs: 30, retryAfterSec: 2 });
  });
});
