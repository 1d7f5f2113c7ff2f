import { describe, expect, it } from 'vitest';
import { isRunId, newRunId, runIdTime } from '../../../src/runs/run-id.js';

const T0 = 1_767_225_600_000;
const bytes = (fill: number) => Buffer.alloc(10, fill);
const timestampOf = (id: string) => parseInt(id.replace(/-/g, '').slice(0, 12), 16);

describe('newRunId', () => {
  it('is a lowercase 8-4-4-4-12 UUID', () => {
    const id = newRunId();
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(id).toHaveLength(36);
  });

  it('sets version 7 and the RFC 9562 variant whatever the random bits', () => {
    for (const fill of [0x00, 0xff, 0x5a, 0xa5]) {
      const id = newRunId(T0, bytes(fill));
      expect(id[14]).toBe('7');
      expect(['8', '9', 'a', 'b']).toContain(id[19]);
    }
  });

  it('lays out timestamp, version, variant and random bits exactly', () => {
    expect(newRunId(0, bytes(0x00))).toBe('00000000-0000-7000-8000-000000000000');
    expect(newRunId(0, bytes(0xff))).toBe('00000000-0000-7fff-bfff-ffffffffffff');
    const random = Buffer.from('0123456789abcdef0123', 'hex');
    // bytes 6..15 come from random, with the top nibble of byte 6 and top two bits of byte 8 replaced.
    expect(newRunId(0x0123456789ab, random)).toBe('01234567-89ab-7123-8567-89abcdef0123');
  });

  it('carries the admission time in the first 48 bits', () => {
    expect(timestampOf(newRunId(T0, bytes(0x42)))).toBe(T0);
    const before = Date.now();
    const id = newRunId();
    const after = Date.now();
    expect(timestampOf(id)).toBeGreaterThanOrEqual(before);
    expect(timestampOf(id)).toBeLessThanOrEqual(after);
  });

  it('sorts by time for increasing timestamps, whatever the random bits', () => {
    const ids = [0, 1, 2, 255, 256, 60_000, 3_600_000, 86_400_000].map((d, i) => newRunId(T0 + d, bytes(i % 2 === 0 ? 0xff : 0x00)));
    expect([...ids].sort()).toEqual(ids);
  });

  it('does not change the random buffer it is given', () => {
    const random = bytes(0xff);
    newRunId(T0, random);
    expect(random.equals(bytes(0xff))).toBe(true);
  });

  it('differs between calls in the same millisecond', () => {
    const ids = new Set(Array.from({ length: 1_000 }, () => newRunId(T0)));
    expect(ids.size).toBe(1_000);
  });
});

describe('isRunId', () => {
  it('accepts generated ids', () => {
    expect(isRunId(newRunId())).toBe(true);
    expect(isRunId(newRunId(T0, bytes(0)))).toBe(true);
  });

  it('accepts any lowercase canonical UUID', () => {
    expect(isRunId('0b6f4c1e-8d5e-4a5b-9a57-3c1f2b9a7e10')).toBe(true);
  });

  it('refuses anything else', () => {
    const id = newRunId(T0, bytes(0xab));
    for (const bad of [
      '',
      id.toUpperCase(),
      id.replace(/-/g, ''),
      `${id}0`,
      id.slice(1),
      ` ${id}`,
      `${id}\n`,
      id.replace(/^./, 'g'),
      '../../etc/passwd',
      '{0b6f4c1e-8d5e-4a5b-9a57-3c1f2b9a7e10}',
    ]) {
      expect(isRunId(bad), bad).toBe(false);
    }
  });
});

describe('runIdTime', () => {
  it('reads back the admission time a run id was made with', () => {
    for (const t of [0, T0, 2 ** 48 - 1]) expect(runIdTime(newRunId(t, bytes(0xa5)))).toBe(t);
  });

  it('is undefined for anything but a UUIDv7', () => {
    expect(runIdTime('not-a-run-id')).toBeUndefined();
    expect(runIdTime('01234567-89ab-4123-8567-89abcdef0123')).toBeUndefined();
  });
});
