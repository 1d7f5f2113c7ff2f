import { describe, expect, it } from 'vitest';
import { LoginThrottle } from '../../../src/api/console/login-throttle.js';

describe('LoginThrottle', () => {
  it('allows `attempts` logins per address at once, then refuses with the seconds until the next', () => {
    let now = 0;
    const t = new LoginThrottle({ attempts: 3, perSec: 60, maxAddresses: 10 }, () => now);
    expect([1, 2, 3].map(() => t.take('10.0.0.1').allowed)).toEqual([true, true, true]);
    expect(t.take('10.0.0.1')).toEqual({ allowed: false, retryAfterSec: 20 });
    // Another address has its own bucket.
    expect(t.take('10.0.0.2').allowed).toBe(true);
    now = 19_000;
    expect(t.take('10.0.0.1')).toEqual({ allowed: false, retryAfterSec: 1 });
    now = 20_000;
    expect(t.take('10.0.0.1').allowed).toBe(true);
    expect(t.take('10.0.0.1').allowed).toBe(false);
  });

  it('refills to at most `attempts`', () => {
    let now = 0;
    const t = new LoginThrottle({ attempts: 2, perSec: 10, maxAddresses: 10 }, () => now);
    now = 3_600_000;
    expect([1, 2, 3].map(() => t.take('a').allowed)).toEqual([true, true, false]);
  });

  it('remembers at most maxAddresses, forgetting the one seen least recently', () => {
    const t = new LoginThrottle({ attempts: 1, perSec: 60, maxAddresses: 2 }, () => 0);
    t.take('a');
    t.take('b');
    t.take('a');
    t.take('c');
    expect(t.size).toBe(2);
    // 'b' was forgotten (a fresh bucket); 'a' was kept (still refused).
    expect(t.take('a').allowed).toBe(false);
    expect(t.take('b').allowed).toBe(true);
  });
});
