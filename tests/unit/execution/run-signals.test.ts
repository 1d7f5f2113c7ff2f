import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import { measuresAdmissionWait, secondsSinceAdmission, tokenCounts, tokenModelLabel } from '../../../src/execution/run-signals.js';

const ADMITTED = Date.UTC(2026, 0, 1, 12, 0, 0);

describe('secondsSinceAdmission', () => {
  it('is the time from admission in seconds', () => {
    expect(secondsSinceAdmission(ADMITTED, ADMITTED + 2_500)).toBe(2.5);
    expect(secondsSinceAdmission(ADMITTED, ADMITTED)).toBe(0);
  });

  it('reads a processor clock behind the API\'s as 0, never as a negative time', () => {
    expect(secondsSinceAdmission(ADMITTED, ADMITTED - 800)).toBe(0);
  });
});

describe('measuresAdmissionWait', () => {
  it('measures an attempt that starts from an admission: the first, or a DLQ replay (no due time)', () => {
    expect(measuresAdmissionWait({ dueAt: null }, 0)).toBe(true);
  });

  it('does not measure a run-level retry: it has a due time, and its time since admission is earlier attempts and a backoff', () => {
    expect(measuresAdmissionWait({ dueAt: ADMITTED + 5_000 }, 0)).toBe(false);
  });

  it('does not measure a start repeated after an infrastructure failure: the first start was measured', () => {
    expect(measuresAdmissionWait({ dueAt: null }, 1)).toBe(false);
    expect(measuresAdmissionWait({ dueAt: null }, 7)).toBe(false);
  });
});

describe('tokenModelLabel', () => {
  const config = loadConfig({ env: {} });
  const anthropic = { model: 'claude-sonnet-4-6' };
  const dependencies = {
    ...config.dependencies,
    'anthropic-fast': { ...config.dependencies.anthropic!, model: 'claude-haiku-4-5' } as (typeof config.dependencies)[string],
  };

  it('takes the model the response names when the config names it', () => {
    expect(tokenModelLabel(dependencies, anthropic, 'claude-sonnet-4-6')).toBe('claude-sonnet-4-6');
    // Configured for another dependency: still a bounded, known value.
    expect(tokenModelLabel(dependencies, anthropic, 'claude-haiku-4-5')).toBe('claude-haiku-4-5');
  });

  it.each(['claude-sonnet-4-6-20260101', 'CLAUDE-SONNET-4-6', '', 'x'.repeat(10_000), 'a"} 1\nsluice_fake_total{', 'order-lookup'])(
    'counts a response naming %j under the dependency\'s configured model: a label value never comes from response data',
    (named) => {
      expect(tokenModelLabel(dependencies, anthropic, named)).toBe('claude-sonnet-4-6');
    },
  );
});

describe('tokenCounts', () => {
  it('gives every kind, zeros included, so each series exists from the first call', () => {
    expect(tokenCounts({ inputTokens: 120, outputTokens: 33, cacheReadTokens: 2_048, cacheCreationTokens: 0 })).toEqual([
      ['input', 120],
      ['output', 33],
      ['cache_read', 2_048],
      ['cache_creation', 0],
    ]);
  });
});
