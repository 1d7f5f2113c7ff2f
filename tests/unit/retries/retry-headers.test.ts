import { describe, expect, it } from 'vitest';
import { RETRY_HEADER, parseRetryClass, parseRetryDueAt, parseRetryFailures, parseRetryOutputSeen, retryRecord } from '../../../src/retries/retry-headers.js';
import { headerText } from '../../../src/kafka/headers.js';
import type { RunRequested } from '../../../src/events/schemas.js';

const ADMITTED = Date.UTC(2026, 0, 1, 0, 0, 0, 0);
const FIRST_FAILURE = ADMITTED + 2_000;
const NOW = ADMITTED + 7_250;

const run: RunRequested = {
  runId: '019b7a00-0000-7000-8000-000000000001',
  tenantId: 'tenant-a',
  workflow: 'support-reply',
  class: 'interactive',
  admittedAt: ADMITTED,
  deadline: ADMITTED + 60_000,
  attempt: 2,
  traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
  input: '{"orderId":"7"}',
  idempotencyKey: 'req-42',
  dueAt: ADMITTED + 1_000,
  tokenReservation: 800,
};

const opts = (over: Partial<Parameters<typeof retryRecord>[1]> = {}): Parameters<typeof retryRecord>[1] => ({
  dueAt: NOW + 4_000,
  failures: 2,
  error: { kind: 'DependencyUnavailable', message: 'anthropic answered 529 overloaded' },
  firstFailureAt: FIRST_FAILURE,
  now: NOW,
  outputSeen: false,
  ...over,
});

describe('retryRecord', () => {
  it('starts the next attempt at dueAt without the settled token reservation and keeps everything else of the run', () => {
    const { event } = retryRecord(run, opts());
    expect(event).toEqual({ ...run, attempt: 3, dueAt: NOW + 4_000, tokenReservation: null, prepaidTurns: null });
    expect(run.attempt).toBe(2);
    expect(run.dueAt).toBe(ADMITTED + 1_000);
  });

  it('carries scheduling, routing and failure context as headers', () => {
    const { headers } = retryRecord({ ...run, class: 'batch' }, opts());
    expect(headers).toEqual({
      traceparent: run.traceparent,
      [RETRY_HEADER.dueAt]: String(NOW + 4_000),
      [RETRY_HEADER.class]: 'batch',
      [RETRY_HEADER.failures]: '2',
      [RETRY_HEADER.errorClass]: 'DependencyUnavailable',
      [RETRY_HEADER.errorMessage]: 'anthropic answered 529 overloaded',
      [RETRY_HEADER.firstFailureAt]: '2026-01-01T00:00:02.000Z',
      [RETRY_HEADER.lastFailureAt]: '2026-01-01T00:00:07.250Z',
      [RETRY_HEADER.outputSeen]: 'false',
    });
    expect(Object.keys(RETRY_HEADER).map((k) => RETRY_HEADER[k as keyof typeof RETRY_HEADER]).every((h) => h.startsWith('sluice-retry-'))).toBe(true);
  });

  it('truncates the error message to 1000 characters', () => {
    const { headers } = retryRecord(run, opts({ error: { kind: 'ToolHttpError', message: 'x'.repeat(5_000) } }));
    expect(headers[RETRY_HEADER.errorMessage]).toBe('x'.repeat(1_000));
  });

  it('round-trips through the parsers as Kafka delivers headers (Buffers)', () => {
    const { headers } = retryRecord(run, opts({ failures: 17, outputSeen: true }));
    const delivered = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, Buffer.from(v)]));
    expect(parseRetryFailures(delivered)).toBe(17);
    expect(parseRetryDueAt(delivered)).toBe(NOW + 4_000);
    expect(parseRetryClass(delivered)).toBe('interactive');
    expect(parseRetryOutputSeen(delivered)).toBe(true);
  });
});

describe('parseRetryOutputSeen', () => {
  it('is true only for `true`: a first attempt, a record from before the header, or garbage has not seen output', () => {
    expect(parseRetryOutputSeen({ [RETRY_HEADER.outputSeen]: Buffer.from('true') })).toBe(true);
    expect(parseRetryOutputSeen(undefined)).toBe(false);
    expect(parseRetryOutputSeen({})).toBe(false);
    for (const raw of ['false', 'TRUE', '1', ' true', '']) expect(parseRetryOutputSeen({ [RETRY_HEADER.outputSeen]: Buffer.from(raw) })).toBe(false);
  });
});

describe('parseRetryFailures', () => {
  it('is 0 without headers or without the header', () => {
    expect(parseRetryFailures(undefined)).toBe(0);
    expect(parseRetryFailures({})).toBe(0);
    expect(parseRetryFailures({ [RETRY_HEADER.failures]: undefined })).toBe(0);
  });

  it.each(['', ' 3', '3 ', '-1', '1.5', '1e3', 'three', '0x10', '9'.repeat(16)])('is 0 for garbage %j', (raw) => {
    expect(parseRetryFailures({ [RETRY_HEADER.failures]: raw })).toBe(0);
    expect(parseRetryFailures({ [RETRY_HEADER.failures]: Buffer.from(raw) })).toBe(0);
  });

  it('reads decimals from strings and Buffers, the last value when the header repeats', () => {
    expect(parseRetryFailures({ [RETRY_HEADER.failures]: '0' })).toBe(0);
    expect(parseRetryFailures({ [RETRY_HEADER.failures]: Buffer.from('4') })).toBe(4);
    expect(parseRetryFailures({ [RETRY_HEADER.failures]: [Buffer.from('1'), '2'] })).toBe(2);
  });
});

describe('scheduling headers', () => {
  it('leave due time and class undefined when absent or unreadable, so the event is decoded instead', () => {
    expect(parseRetryDueAt(undefined)).toBeUndefined();
    expect(parseRetryDueAt({ [RETRY_HEADER.dueAt]: 'soon' })).toBeUndefined();
    expect(parseRetryDueAt({ [RETRY_HEADER.dueAt]: '2026-01-01T00:00:00Z' })).toBeUndefined();
    expect(parseRetryClass({})).toBeUndefined();
    expect(parseRetryClass({ [RETRY_HEADER.class]: 'premium' })).toBeUndefined();
    expect(parseRetryClass({ [RETRY_HEADER.class]: Buffer.from('batch') })).toBe('batch');
  });

  it('headerText reads strings, Buffers and repeated keys', () => {
    expect(headerText({ a: 'x' }, 'a')).toBe('x');
    expect(headerText({ a: Buffer.from('y') }, 'a')).toBe('y');
    expect(headerText({ a: ['x', Buffer.from('z')] }, 'a')).toBe('z');
    expect(headerText({ a: [] }, 'a')).toBeUndefined();
    expect(headerText(undefined, 'a')).toBeUndefined();
  });
});
