import { InvalidArgumentError } from 'commander';
import { describe, expect, it } from 'vitest';
import { filterFrom, parseId, parseLimit, parseRate, parseWhen, UsageError } from '../../../src/cli/dlq-arguments.js';

const NOW = Date.UTC(2026, 2, 10, 12, 0, 0);

describe('parseWhen', () => {
  it.each([
    ['30s', NOW - 30_000],
    ['30m', NOW - 30 * 60_000],
    ['6h', NOW - 6 * 3_600_000],
    ['1d', NOW - 86_400_000],
    ['90m', NOW - 90 * 60_000],
    ['2h', NOW - 2 * 3_600_000],
    ['7d', NOW - 7 * 86_400_000],
    ['1w', NOW - 7 * 86_400_000],
    ['2026-03-01', Date.UTC(2026, 2, 1)],
    ['2026-03-01T12:30Z', Date.UTC(2026, 2, 1, 12, 30)],
    ['2026-03-01T12:30:15.250Z', Date.UTC(2026, 2, 1, 12, 30, 15, 250)],
    ['2026-03-01 12:30', Date.UTC(2026, 2, 1, 12, 30)],
    ['2026-03-01T12:30+02:00', Date.UTC(2026, 2, 1, 10, 30)],
  ])('reads %s', (raw, expected) => {
    expect(parseWhen(raw, NOW).getTime()).toBe(expected);
  });

  it('reads a time without an offset as UTC, whatever the machine zone', () => {
    expect(parseWhen('2026-07-01T00:00', NOW).toISOString()).toBe('2026-07-01T00:00:00.000Z');
  });

  it.each(['yesterday', '2 hours', '2H', '-2h', '2026-02-30', '2026-13-01', '2026-03-01T25:00Z', '2026-3-1', '', '99999999999999999w'])('refuses %j', (raw) => {
    expect(() => parseWhen(raw, NOW)).toThrow(InvalidArgumentError);
  });
});

describe('parseId, parseLimit, parseRate', () => {
  it('takes positive integer ids up to bigint range', () => {
    expect(parseId('42')).toBe('42');
    expect(parseId('9223372036854775807')).toBe('9223372036854775807');
    for (const bad of ['0', '-1', '007', '1.5', 'abc', '12abc', '9223372036854775808', ''])
      expect(() => parseId(bad), bad).toThrow(/is not an id/);
  });

  it('takes limits from 1 to 10000', () => {
    expect(parseLimit('1')).toBe(1);
    expect(parseLimit('10000')).toBe(10_000);
    for (const bad of ['0', '10001', '-5', '2.5', 'ten']) expect(() => parseLimit(bad), bad).toThrow(InvalidArgumentError);
  });

  it('takes a rate as N or N/s', () => {
    expect(parseRate('10')).toBe(10);
    expect(parseRate('2.5/s')).toBe(2.5);
    for (const bad of ['0', '0/s', '-1', '5/m', 'fast', '1001']) expect(() => parseRate(bad), bad).toThrow(InvalidArgumentError);
  });
});

describe('filterFrom', () => {
  it('maps the options, `all` meaning any status', () => {
    const since = new Date(NOW - 3_600_000);
    expect(filterFrom({ tenant: 't', workflow: 'w', reason: 'decode_error', status: 'pending', since, limit: 5 })).toEqual({
      tenant: 't',
      workflow: 'w',
      reason: 'decode_error',
      status: 'pending',
      since,
      until: undefined,
      limit: 5,
    });
    expect(filterFrom({ status: 'all' }).status).toBeUndefined();
  });

  it('refuses a time window that ends before it starts, naming both options', () => {
    const call = () => filterFrom({ since: new Date(NOW), until: new Date(NOW - 1) });
    expect(call).toThrow(UsageError);
    expect(call).toThrow(/--since .* must be before --until/);
  });
});
