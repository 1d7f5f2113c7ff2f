import { describe, expect, it } from 'vitest';
import { pooledRandomBytes } from '../../../src/util/pooled-random.js';

describe('pooledRandomBytes', () => {
  it('returns the length asked for, including lengths over the pool', () => {
    for (const n of [0, 1, 10, 16, 8 * 1024, 8 * 1024 + 1]) expect(pooledRandomBytes(n)).toHaveLength(n);
  });

  it('never hands out the same bytes twice, across refills', () => {
    // 3 pools' worth of 16-byte draws: a repeat would mean a slice served twice or a pool not refilled.
    const seen = new Set<string>();
    for (let i = 0; i < 1_536; i++) seen.add(pooledRandomBytes(16).toString('hex'));
    expect(seen.size).toBe(1_536);
  });

  it('returns copies that a later refill does not change', () => {
    const first = pooledRandomBytes(32);
    const kept = Buffer.from(first);
    for (let i = 0; i < 1_000; i++) pooledRandomBytes(32);
    expect(first.equals(kept)).toBe(true);
  });

  it('spreads bits evenly (a zeroed or constant pool would not)', () => {
    const bytes = Buffer.concat(Array.from({ length: 1_000 }, () => pooledRandomBytes(10)));
    let ones = 0;
    for (const b of bytes) for (let bit = 0; bit < 8; bit++) ones += (b >> bit) & 1;
    const share = ones / (bytes.length * 8);
    expect(share).toBeGreaterThan(0.48);
    expect(share).toBeLessThan(0.52);
  });
});
