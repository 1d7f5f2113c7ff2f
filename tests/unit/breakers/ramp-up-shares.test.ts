import { describe, expect, it } from 'vitest';
import type { BreakerView } from '../../../src/breakers/breaker-gate.js';
import { rampUpShares } from '../../../src/breakers/ramp-up-shares.js';
import { loadConfig } from '../../../src/config/load.js';

describe('rampUpShares', () => {
  const config = loadConfig({ env: {} });
  config.dependencies.anthropic!.breaker.rampUp = { initialFraction: 0.2, stepFraction: 0.4, intervalMs: 1_000 };
  const views = new Map<string, BreakerView>();
  const board = { view: (d: string) => views.get(d) ?? { name: d, state: 'closed' as const } };
  const shareOf = rampUpShares(config, board, () => 10_000);

  it('ramps a dependency from the close time its breaker view carries', () => {
    views.set('anthropic', { name: 'anthropic', state: 'closed', closedAt: 10_000 });
    expect(shareOf('anthropic')).toBeCloseTo(0.2);
    views.set('anthropic', { name: 'anthropic', state: 'closed', closedAt: 9_000 });
    expect(shareOf('anthropic')).toBeCloseTo(0.6);
    views.set('anthropic', { name: 'anthropic', state: 'closed', closedAt: 8_000 });
    expect(shareOf('anthropic')).toBe(1);
  });

  it('gives the whole cap to a breaker never tripped, one not closed (the breaker decides there) and one without a ramp', () => {
    views.set('anthropic', { name: 'anthropic', state: 'closed' });
    expect(shareOf('anthropic')).toBe(1);
    views.set('anthropic', { name: 'anthropic', state: 'half_open' });
    expect(shareOf('anthropic')).toBe(1);
    views.set('report', { name: 'report', state: 'closed', closedAt: 10_000 });
    expect(shareOf('report')).toBe(1);
    expect(shareOf('not-configured')).toBe(1);
  });
});
