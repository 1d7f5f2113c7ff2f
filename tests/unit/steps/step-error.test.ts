import { describe, expect, it } from 'vitest';
import { timedOutOnDeadline } from '../../../src/steps/step-error.js';

describe('timedOutOnDeadline', () => {
  const own = { connectMs: 3_000, readMs: 10_000, totalMs: 30_000 };

  it('blames the deadline for a budget it cut below the dependency\'s own', () => {
    expect(timedOutOnDeadline('total_timeout', own, 29_999)).toBe(true);
    expect(timedOutOnDeadline('connect_timeout', own, 2_000)).toBe(true);
    expect(timedOutOnDeadline('read_timeout', own, 9_000)).toBe(true);
  });

  it('blames the dependency for a budget of its own, even while the deadline shortened another one', () => {
    expect(timedOutOnDeadline('total_timeout', own, 30_000)).toBe(false);
    expect(timedOutOnDeadline('connect_timeout', own, 5_000)).toBe(false);
    expect(timedOutOnDeadline('connect_timeout', own, 3_000)).toBe(false);
    expect(timedOutOnDeadline('read_timeout', own, 20_000)).toBe(false);
  });

  it('leaves every failure that is not a timeout alone', () => {
    for (const kind of ['connection', 'http_status', 'bad_response', 'deadline'] as const) expect(timedOutOnDeadline(kind, own, 1_000)).toBe(false);
  });
});
