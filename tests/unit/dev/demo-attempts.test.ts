import { describe, expect, it } from 'vitest';
import { retryWaits, type Attempt } from '../../../src/dev/demo/attempts.js';

const attempt = (idempotencyKey: string, sentAt: number, answeredAt: number, status: number, retryAfterSec?: number): Attempt => ({ idempotencyKey, sentAt, answeredAt, status, retryAfterSec });

describe("the demo's judgement of the client's retries", () => {
  it('measures each retry from the refusal it follows, per key', () => {
    const waits = retryWaits([attempt('a', 0, 10, 429, 1), attempt('b', 0, 12, 429, 2), attempt('a', 1010, 1020, 429, 1), attempt('b', 2012, 2020, 202), attempt('a', 2020, 2030, 202)]);
    expect(waits).toEqual([
      { idempotencyKey: 'a', askedSec: 1, waitedMs: 1000, honoured: true },
      { idempotencyKey: 'a', askedSec: 1, waitedMs: 1000, honoured: true },
      { idempotencyKey: 'b', askedSec: 2, waitedMs: 2000, honoured: true },
    ]);
  });

  it('reports a retry sent sooner than its Retry-After', () => {
    expect(retryWaits([attempt('a', 0, 10, 429, 2), attempt('a', 1500, 1510, 202)])).toEqual([{ idempotencyKey: 'a', askedSec: 2, waitedMs: 1490, honoured: false }]);
  });

  it('counts no retry where nothing asked for a wait, or where a key was sent once', () => {
    expect(retryWaits([attempt('a', 0, 10, 503), attempt('a', 20, 30, 202), attempt('b', 0, 5, 202)])).toEqual([]);
  });

  it('orders attempts by when they were sent, not by when they were recorded', () => {
    expect(retryWaits([attempt('a', 1200, 1210, 202), attempt('a', 0, 100, 429, 1)])).toEqual([{ idempotencyKey: 'a', askedSec: 1, waitedMs: 1100, honoured: true }]);
  });
});
