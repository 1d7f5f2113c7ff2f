import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isDeadLetterId, isInstant } from '../../../src/api/params.js';

const MAX_BIGINT = 2n ** 63n - 1n;

describe('isInstant', () => {
  it('accepts every instant JavaScript writes in RFC 3339 (years 0000 to 9999)', () => {
    fc.assert(fc.property(fc.date({ min: new Date('0000-01-01T00:00:00Z'), max: new Date('9999-12-31T23:59:59.999Z'), noInvalidDate: true }), (d) => isInstant(d.toISOString())));
  });

  it('accepts only what Date.parse reads as a number, so nothing reaches Postgres as NaN', () => {
    const digits = (n: number) => fc.integer({ min: 0, max: 10 ** n - 1 }).map((v) => String(v).padStart(n, '0'));
    const loose = fc
      .tuple(digits(4), digits(2), digits(2), fc.constantFrom('T', 't', ' '), digits(2), digits(2), digits(2), fc.constantFrom('', '.5', '.123456789'), fc.constantFrom('Z', 'z', '+00:00', '-23:59', '+24:00', '+05:60', ''))
      .map(([y, mo, d, sep, h, mi, s, frac, zone]) => `${y}-${mo}-${d}${sep}${h}:${mi}:${s}${frac}${zone}`);
    fc.assert(fc.property(loose, (text) => !isInstant(text) || Number.isFinite(Date.parse(text))));
  });

  it('refuses leap seconds, days a month lacks, offsets past a day and other shapes', () => {
    for (const text of ['2016-12-31T23:59:60Z', '2021-02-29T00:00:00Z', '2020-04-31T00:00:00Z', '2020-01-01T24:00:00Z', '2020-01-01T00:00:00+24:00', '2020-01-01T00:00:00', '2020-01-01', 'yesterday', '+010000-01-01T00:00:00.000Z', '2020-01-01T00:00:00.1234567890Z', ''])
      expect(isInstant(text), text).toBe(false);
    for (const text of ['2016-12-31T23:59:59Z', '2020-02-29T00:00:00Z', '2020-01-01t00:00:00z', '2020-01-01T00:00:00.123456789+05:30']) expect(isInstant(text), text).toBe(true);
  });
});

describe('isDeadLetterId', () => {
  it('accepts every positive bigint in decimal, and nothing above', () => {
    fc.assert(fc.property(fc.bigInt({ min: 1n, max: MAX_BIGINT }), (n) => isDeadLetterId(n.toString())));
    fc.assert(fc.property(fc.bigInt({ min: MAX_BIGINT + 1n, max: 10n ** 19n - 1n }), (n) => !isDeadLetterId(n.toString())));
  });

  it('refuses zero, signs, leading zeros and more than 19 digits', () => {
    for (const text of ['0', '-1', '+1', '01', '9999999999999999999', '9223372036854775808', '1'.repeat(20), '1e3', ' 1', '']) expect(isDeadLetterId(text), text).toBe(false);
    expect(isDeadLetterId('9223372036854775807')).toBe(true);
  });
});
