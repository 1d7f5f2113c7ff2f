import { BlockList } from 'node:net';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AuthFailureThrottle, clientBlock } from '../../../src/api/auth-throttle.js';

describe('AuthFailureThrottle', () => {
  it('lets an address fail `attempts` times at once, then refuses it with the seconds until the next attempt', () => {
    let now = 0;
    const t = new AuthFailureThrottle({ attempts: 3, perSec: 60, maxAddresses: 10 }, () => now);
    for (let i = 0; i < 3; i++) {
      expect(t.refusal('10.0.0.1')).toBeUndefined();
      t.failed('10.0.0.1');
    }
    expect(t.refusal('10.0.0.1')).toEqual({ retryAfterSec: 20 });
    // Another address has its own bucket.
    expect(t.refusal('10.0.0.2')).toBeUndefined();
    now = 19_000;
    expect(t.refusal('10.0.0.1')).toEqual({ retryAfterSec: 1 });
    now = 20_000;
    expect(t.refusal('10.0.0.1')).toBeUndefined();
    t.failed('10.0.0.1');
    expect(t.refusal('10.0.0.1')).toEqual({ retryAfterSec: 20 });
  });

  it('counts only failures: an address that never fails is never refused and takes no memory', () => {
    const t = new AuthFailureThrottle({ attempts: 1, perSec: 60, maxAddresses: 100 }, () => 0);
    for (let i = 0; i < 1_000; i++) expect(t.refusal('10.0.0.1')).toBeUndefined();
    expect(t.size).toBe(0);
  });

  it('refills to at most `attempts`', () => {
    let now = 0;
    const t = new AuthFailureThrottle({ attempts: 2, perSec: 10, maxAddresses: 10 }, () => now);
    t.failed('a');
    now = 3_600_000;
    t.failed('a');
    t.failed('a');
    expect(t.refusal('a')).toBeDefined();
  });

  it('says a throttle begins once per episode: at the failure that spends the last attempt, again only after the bucket filled up', () => {
    let now = 0;
    const t = new AuthFailureThrottle({ attempts: 2, perSec: 60, maxAddresses: 10 }, () => now);
    expect([t.failed('a'), t.failed('a')]).toEqual([false, true]);
    // An attacker guessing at the refill rate stays in the same throttle.
    now += 30_000;
    expect(t.failed('a')).toBe(false);
    now += 30_000;
    expect(t.failed('a')).toBe(false);
    now += 60_000;
    expect([t.failed('a'), t.failed('a')]).toEqual([false, true]);
  });

  it('remembers at most maxAddresses, forgetting the one that failed least recently', () => {
    const t = new AuthFailureThrottle({ attempts: 1, perSec: 60, maxAddresses: 2 }, () => 0);
    t.failed('10.0.0.1');
    t.failed('10.0.0.2');
    t.failed('10.0.0.1');
    t.failed('10.0.0.3');
    expect(t.size).toBe(2);
    // .2 was forgotten (a fresh bucket); .1 was kept (still refused).
    expect(t.refusal('10.0.0.1')).toBeDefined();
    expect(t.refusal('10.0.0.2')).toBeUndefined();
  });

  it('never evaluates more keys from an address than its bucket allows, however failures, successes and time interleave', () => {
    const step = fc.oneof(fc.constant({ kind: 'wrong' as const }), fc.constant({ kind: 'right' as const }), fc.integer({ min: 1, max: 30_000 }).map((ms) => ({ kind: 'wait' as const, ms })));
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 20 }), fc.integer({ min: 1, max: 600 }), fc.array(step, { maxLength: 300 }), (attempts, perSec, steps) => {
        let now = 0;
        const t = new AuthFailureThrottle({ attempts, perSec, maxAddresses: 100 }, () => now);
        let guesses = 0;
        for (const s of steps) {
          if (s.kind === 'wait') now += s.ms;
          // A throttled address is refused before its key is looked at, a right key included.
          else if (t.refusal('198.51.100.7') === undefined && s.kind === 'wrong') {
            t.failed('198.51.100.7');
            guesses++;
          }
        }
        // The bucket's bound: what it held at first, plus what refilled meanwhile.
        return guesses <= attempts + Math.floor((now * attempts) / (perSec * 1000)) + 1;
      }),
    );
  });

  it("never refuses an address for another block's failures", () => {
    fc.assert(
      fc.property(fc.ipV4(), fc.ipV4(), fc.integer({ min: 1, max: 50 }), (attacker, other, failures) => {
        fc.pre(attacker !== other);
        const t = new AuthFailureThrottle({ attempts: 1, perSec: 86_400, maxAddresses: 100 }, () => 0);
        for (let i = 0; i < failures; i++) t.failed(attacker);
        return t.refusal(other) === undefined && t.refusal(attacker) !== undefined;
      }),
    );
  });
});

describe('clientBlock', () => {
  it('keeps IPv4, counts IPv6 by its /64, and reads an IPv4-mapped address as the IPv4 it is', () => {
    expect(clientBlock('203.0.113.7')).toBe('203.0.113.7');
    expect(clientBlock('2001:db8:1:2:aaaa:bbbb:cccc:dddd')).toBe('2001:db8:1:2::/64');
    expect(clientBlock('2001:db8:1:2::1')).toBe('2001:db8:1:2::/64');
    expect(clientBlock('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(clientBlock('::1')).toBe('0:0:0:0::/64');
    expect(clientBlock('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
    expect(clientBlock('::ffff:198.51.100.7')).toBe('198.51.100.7');
    expect(clientBlock('::ffff:c633:6407')).toBe('198.51.100.7');
    expect(clientBlock('not an address')).toBe('not an address');
  });

  it('gives two IPv6 addresses the same block exactly when one /64 holds both (Node\'s BlockList the judge), written in full or compressed', () => {
    const groups = (n: number) => fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: n, maxLength: n });
    // Written as Node's URL parser canonicalises it: lowercase, the longest run of zero groups as '::'.
    const compressed = (g: number[]) => new URL(`http://[${g.map((x) => x.toString(16)).join(':')}]/`).hostname.slice(1, -1);
    fc.assert(
      fc.property(groups(4), groups(4), groups(4), groups(4), fc.boolean(), fc.boolean(), (netA, netB, hostA, hostB, sameNet, compress) => {
        const a = [...netA, ...hostA];
        const b = [...(sameNet ? netA : netB), ...hostB];
        const write = (g: number[]) => (compress ? compressed(g) : g.map((x) => x.toString(16)).join(':'));
        const [ka, kb] = [clientBlock(write(a)), clientBlock(write(b))];
        // IPv4-mapped addresses (::ffff:0:0/96) are IPv4 clients, not /64s.
        fc.pre(ka.endsWith('/64') && kb.endsWith('/64'));
        const net = new BlockList();
        net.addSubnet(write(a), 64, 'ipv6');
        return (ka === kb) === net.check(write(b), 'ipv6');
      }),
      { numRuns: 500 },
    );
  });
});
