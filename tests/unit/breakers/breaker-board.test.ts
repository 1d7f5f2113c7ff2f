import { describe, expect, it } from 'vitest';
import { parseBreakerHash, parseForcedHash } from '../../../src/breakers/breaker-board.js';

describe('parseBreakerHash', () => {
  it('reads a missing hash as a closed breaker with no retryAt', () => {
    const s = parseBreakerHash('anthropic', {});
    expect(s).toEqual({ name: 'anthropic', state: 'closed' });
    expect('retryAt' in s).toBe(false);
  });

  it('reads open with its retryAt', () => {
    expect(parseBreakerHash('anthropic', { state: 'open', retryAt: '1767225605000' })).toEqual({ name: 'anthropic', state: 'open', retryAt: 1_767_225_605_000 });
  });

  it('drops a retryAt left over from the open state once half-open or closed: it means nothing there', () => {
    expect(parseBreakerHash('order_lookup', { state: 'half_open', retryAt: '5' })).toEqual({ name: 'order_lookup', state: 'half_open' });
    expect(parseBreakerHash('order_lookup', { state: 'closed', retryAt: '5' })).toEqual({ name: 'order_lookup', state: 'closed' });
  });

  it('reads closedAt only while closed: the start of the ramp-up', () => {
    expect(parseBreakerHash('anthropic', { state: 'closed', closedAt: '1767225605000' })).toEqual({ name: 'anthropic', state: 'closed', closedAt: 1_767_225_605_000 });
    expect(parseBreakerHash('anthropic', { state: 'open', retryAt: '7', closedAt: '5' })).toEqual({ name: 'anthropic', state: 'open', retryAt: 7 });
    expect(parseBreakerHash('anthropic', { state: 'half_open', closedAt: '5' })).toEqual({ name: 'anthropic', state: 'half_open' });
    for (const closedAt of ['', 'soon', 'NaN']) expect(parseBreakerHash('anthropic', { state: 'closed', closedAt })).toEqual({ name: 'anthropic', state: 'closed' });
  });

  it('reads an open breaker without retryAt as open, probing at an unknown time', () => {
    expect(parseBreakerHash('anthropic', { state: 'open' })).toEqual({ name: 'anthropic', state: 'open' });
  });

  it('reads unknown, differently cased or missing states as closed (fails open)', () => {
    for (const state of ['OPEN', 'Open', 'half-open', 'halfopen', 'tripped', '', ' open', '1']) {
      expect(parseBreakerHash('x', { state, retryAt: '10' }).state, JSON.stringify(state)).toBe('closed');
    }
    expect(parseBreakerHash('x', { retryAt: '10' }).state).toBe('closed');
    expect(parseBreakerHash('x', { state: 'closed' })).toEqual({ name: 'x', state: 'closed' });
  });

  it('drops a retryAt that is not a finite number', () => {
    for (const retryAt of ['soon', 'NaN', 'Infinity', '-Infinity', 'inf', '10:42:05', '2026-01-01T00:00:00Z']) {
      const s = parseBreakerHash('x', { state: 'open', retryAt });
      expect(s, retryAt).toEqual({ name: 'x', state: 'open' });
    }
  });

  // Regression guard (this was a bug): Number('') is 0, so a blank retryAt reads as "probe at the epoch" (1970): an
  // interactive run is then never refused for that open dependency (0 + service time ≤ deadline).
  it('drops a blank retryAt instead of reading it as the epoch', () => {
    expect(parseBreakerHash('x', { state: 'open', retryAt: '' })).toEqual({ name: 'x', state: 'open' });
  });

  it('ignores other fields', () => {
    expect(parseBreakerHash('x', { state: 'open', retryAt: '7', failures: '12', probes: '1' })).toEqual({ name: 'x', state: 'open', retryAt: 7 });
  });
});

describe('parseBreakerHash with the forced hash', () => {
  it('keeps an operator force beside the shared state', () => {
    expect(parseBreakerHash('anthropic', { state: 'closed' }, { mode: 'open', until: '9000', at: '1000' })).toEqual({ name: 'anthropic', state: 'closed', forced: { mode: 'open', until: 9000 } });
    expect(parseBreakerHash('anthropic', { state: 'open', retryAt: '7' }, { mode: 'closed', until: '9000' })).toEqual({ name: 'anthropic', state: 'open', retryAt: 7, forced: { mode: 'closed', until: 9000 } });
  });

  it('reads no force from a missing, unknown or untimed forced hash: a force must end', () => {
    expect(parseForcedHash({})).toBeUndefined();
    expect(parseForcedHash({ mode: 'half_open', until: '9000' })).toBeUndefined();
    expect(parseForcedHash({ mode: 'open' })).toBeUndefined();
    expect(parseForcedHash({ mode: 'open', until: '' })).toBeUndefined();
    expect(parseForcedHash({ mode: 'closed', until: 'later' })).toBeUndefined();
  });
});
