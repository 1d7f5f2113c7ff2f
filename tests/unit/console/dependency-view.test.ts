import { describe, expect, it } from 'vitest';
import type { DependencyReport } from '../../../src/api/console/dependencies.js';
import { dependencyRows, forceWarning } from '../../../src/console/dependency-view.js';
import { emptyReport } from '../../support/breaker-admin-fakes.js';

const AT = 1_800_000_000_000;

function report(patch: { breaker?: Partial<DependencyReport['breaker']>; pacing?: DependencyReport['pacing']; retryBudget?: Partial<DependencyReport['retryBudget']> } = {}): DependencyReport {
  const r = emptyReport('anthropic');
  return { ...r, at: AT, breaker: { ...r.breaker, ...patch.breaker }, pacing: patch.pacing ?? r.pacing, retryBudget: { ...r.retryBudget, ...patch.retryBudget } };
}

const row = (patch: Parameters<typeof report>[0]) => dependencyRows([report(patch)])[0]!;

describe("dependencyRows: what the dependency's calls went to", () => {
  it('gives the calls wasted by how their runs ended, and the tenants\' shares of the turns, largest first', () => {
    const [r] = dependencyRows([report()], { anthropic: { wasted: { expired: 3, failed: 9 }, turns: { 'tenant-b': 1, 'tenant-a': 3 } } });
    expect(r).toMatchObject({ wasted: '12 (failed 9, expired 3)', turnShares: 'tenant-a 75%, tenant-b 25%' });
  });

  it('says so when nothing was wasted or booked', () => {
    expect(row({})).toMatchObject({ wasted: 'none', turnShares: 'none booked' });
  });
});

describe('dependencyRows: the breaker state', () => {
  it('closed: ok, offering both forces, and since when after a trip', () => {
    expect(row({})).toMatchObject({ dependency: 'anthropic', kind: 'llm', state: 'closed', tone: 'ok', note: '', forced: null, actions: ['force-open', 'force-closed'] });
    expect(row({ breaker: { closedAt: AT - 65_000 } }).note).toBe('closed 1 min 5 s ago');
  });

  it('open: bad, with when the next probe goes', () => {
    expect(row({ breaker: { state: 'open', retryAt: AT + 4_200 } })).toMatchObject({ state: 'open', tone: 'bad', note: 'next probe in 4.2 s' });
    expect(row({ breaker: { state: 'open', retryAt: null } }).note).toBe('next probe: unknown');
  });

  it('half-open: a warning, with its probes in flight', () => {
    expect(row({ breaker: { state: 'half_open', probesInFlight: 1 } })).toMatchObject({ state: 'half-open', tone: 'warn', note: '1 probe in flight' });
    expect(row({ breaker: { state: 'half_open', probesInFlight: 2 } }).note).toBe('2 probes in flight');
  });

  it('a force wins over the state, says when it ends and what the breaker itself says, and offers the other force and the clear', () => {
    expect(row({ breaker: { state: 'closed', forced: { mode: 'open', until: AT + 600_000 } } })).toMatchObject({
      state: 'forced open',
      tone: 'bad',
      forced: 'open',
      note: 'until the force ends in 10 min 0 s; the breaker itself is closed',
      actions: ['force-closed', 'clear'],
    });
    expect(row({ breaker: { state: 'open', retryAt: AT + 1, forced: { mode: 'closed', until: AT + 30_000 } } })).toMatchObject({
      state: 'forced closed',
      tone: 'warn',
      note: 'until the force ends in 30 s; the breaker itself is open',
      actions: ['force-open', 'clear'],
    });
  });
});

describe('dependencyRows: the window, pacing and retry budget', () => {
  it('rates against their thresholds, as shares of the calls in the window', () => {
    const r = row({ breaker: { window: { calls: 10, failures: 4, slowCalls: 1 } } });
    expect(r.failureRate).toEqual({ label: 'failures', use: 0.8, text: '40% (4 of 10); opens at 50% or 5 failures' });
    expect(r.slowCallRate).toEqual({ label: 'slow calls', use: 0.1, text: '10% (1 ≥ 1 min 0 s); opens at 100%' });
    expect(r.window).toBe('last 30 s, judged from 5 calls');
  });

  it('an empty window is 0%, and a rate past its threshold fills the meter, no further', () => {
    expect(row({}).failureRate.text).toBe('0% (0 of 0); opens at 50% or 5 failures');
    expect(row({ breaker: { window: { calls: 4, failures: 4, slowCalls: 0 } } }).failureRate.use).toBe(1);
  });

  it('each paced bucket with its booking against its burst and its limit', () => {
    const r = row({ pacing: { buckets: [{ bucket: 'input_tokens', perMinute: 40_000, source: 'observed', used: 250, burst: 666.67 }], notBefore: null } });
    expect(r.pacing).toEqual([{ label: 'input tokens/min', use: 250 / 666.67, text: '250 of 667 booked; limit 40000/min (observed)' }]);
    expect(row({}).pacing).toEqual([]);
  });

  it('retries used of those allowed', () => {
    expect(row({ retryBudget: { calls: 200, retries: 15, allowed: 20 } }).retryBudget).toEqual({ label: 'retries', use: 0.75, text: '15 of 20 allowed (10% of 200 calls) in the last 1 min 0 s' });
    expect(row({ retryBudget: { retries: 3, allowed: 0 } }).retryBudget.use).toBe(1);
  });
});

describe('forceWarning', () => {
  it('says what each action does, and that a force ends by itself', () => {
    expect(forceWarning('anthropic', 'force-open', 15)).toBe('Force anthropic open for 15 min (it ends by itself then)? Every call to it is refused: runs needing it wait or get their fallback.');
    expect(forceWarning('anthropic', 'force-closed', 5)).toContain('closed for 5 min');
    expect(forceWarning('anthropic', 'clear', 5)).toBe('End the force on anthropic? Its breaker decides again at once, from its own state.');
  });
});
