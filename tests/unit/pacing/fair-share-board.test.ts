import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import { interactiveAskers, parseTenantDemand, requestsPerSec } from '../../../src/pacing/fair-share-board.js';

const config = loadConfig({ env: {} });

describe('parseTenantDemand', () => {
  it('reads each configured tenant’s decayed asks as units a second, with its weight', () => {
    const hash = { 'd:tenant-a': '50', 'u:tenant-a': '1000', 'tat:tenant-a': '9999', 'd:tenant-c': '10', 'u:tenant-c': '1000' };
    const weights: Record<string, number> = { 'tenant-a': 2, 'tenant-c': 1 };
    expect(parseTenantDemand(hash, 1_000, 5_000, (t) => weights[t])).toEqual([
      { tenant: 'tenant-a', weight: 2, perSec: 10 },
      { tenant: 'tenant-c', weight: 1, perSec: 2 },
    ]);
  });

  it('leaves out tenants the config does not know and fields that are not numbers', () => {
    const hash = { 'd:gone': '50', 'u:gone': '1000', 'd:tenant-a': 'x', 'u:tenant-a': '1000', 'd:tenant-c': '5' };
    expect(parseTenantDemand(hash, 1_000, 5_000, (t) => (t === 'gone' ? undefined : 1))).toEqual([]);
  });
});

describe('requestsPerSec', () => {
  const anthropic = config.dependencies.anthropic!;
  it('is the observed requests limit per second when none is configured, the lower of both otherwise', () => {
    expect(requestsPerSec(anthropic, { requests: '900' })).toBe(15);
    expect(requestsPerSec(anthropic, {})).toBeUndefined();
    const limited = { ...anthropic, rateLimit: { requestsPerMinute: 600, burstSeconds: 1 } };
    expect(requestsPerSec(limited, { requests: '900' })).toBe(10);
    expect(requestsPerSec(limited, { requests: '60' })).toBe(1);
    expect(requestsPerSec(limited, { requests: 'junk' })).toBe(10);
  });
});

describe('interactiveAskers', () => {
  it('names the tenants whose last interactive ask is within the window', () => {
    const hash = { 'i:tenant-a': '9000', 'i:tenant-b': '1000', 'd:tenant-c': '5', 'i:bad': 'x' };
    expect(interactiveAskers(hash, 10_000, 5_000)).toEqual(new Set(['tenant-a']));
  });
});
