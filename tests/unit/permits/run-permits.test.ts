import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import { leasesPerRun } from '../../../src/config/workflows.js';
import type { RunRequested } from '../../../src/events/schemas.js';
import { createLogger } from '../../../src/obs/logger.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import type { PermitLease } from '../../../src/permits/permit-store.js';
import { RedisDependencyPermits } from '../../../src/permits/run-permits.js';
import { redisKeys } from '../../../src/redis/keys.js';

const run = { runId: 'r1', attempt: 1, tenantId: 'tenant-a', workflow: 'support-agent', class: 'interactive', deadline: Date.now() + 60_000 } as RunRequested;

describe('RedisDependencyPermits', () => {
  it('gives a granted lease back at once when it cannot be kept, instead of holding its permit until it lapses', async () => {
    const released: string[] = [];
    const lease: PermitLease = { token: 'r1:1:order-lookup:ab', scopes: ['dependency:order-lookup'], keys: ['k'], expiresAt: Date.now() + 30_000 };
    const permits = new RedisDependencyPermits({
      config: loadConfig({ env: {} }),
      keys: redisKeys(''),
      store: { tryAcquire: async () => ({ granted: true, lease }), release: async (l) => (released.push(l.token), 1) },
      keeper: {
        keep: () => {
          throw new RangeError('already keeping 16 leases; release one first');
        },
        release: async () => 0,
      },
      wakeups: { onWake: () => () => undefined, fallbackPollMs: 100 },
      metrics: createMetrics(),
      logger: createLogger('silent'),
    });
    await expect(permits.acquire('order-lookup', run)).rejects.toThrow('already keeping 16 leases');
    expect(released).toEqual([lease.token]);
  });
});

describe('RedisDependencyPermits waiters', () => {
  it('lists a refused call as a waiter of its dependency since its first try, until it gets its permit', async () => {
    const lease: PermitLease = { token: 'r1:1:order-lookup:ab', scopes: ['dependency:order-lookup'], keys: ['k'], expiresAt: Date.now() + 30_000 };
    let free = false;
    let wake = () => undefined as void;
    let clock = 1_000;
    const permits = new RedisDependencyPermits({
      config: loadConfig({ env: {} }),
      keys: redisKeys(''),
      store: { tryAcquire: async () => (free ? { granted: true, lease } : { granted: false, blockedBy: 'dependency:order-lookup', count: 1, limit: 1 }), release: async () => 1 },
      keeper: { keep: () => undefined, release: async () => 1 },
      wakeups: { onWake: (l) => ((wake = () => l(null)), () => undefined), fallbackPollMs: 60_000 },
      metrics: createMetrics(),
      logger: createLogger('silent'),
    });
    const granted = permits.acquire('order-lookup', run, () => clock);
    await new Promise((r) => setTimeout(r, 10));
    clock = 5_000;
    expect([...permits.waiters()]).toEqual([{ scopes: ['dependency:order-lookup'], since: 1_000 }]);
    free = true;
    wake();
    await granted;
    expect([...permits.waiters()]).toEqual([]);
  });

  it('no longer lists a call that gave up at its deadline', async () => {
    let clock = 1_000;
    const permits = new RedisDependencyPermits({
      config: loadConfig({ env: {} }),
      keys: redisKeys(''),
      store: { tryAcquire: async () => ({ granted: false, blockedBy: 'dependency:order-lookup', count: 1, limit: 1 }), release: async () => 1 },
      keeper: { keep: () => undefined, release: async () => 1 },
      wakeups: { onWake: () => () => undefined, fallbackPollMs: 50 },
      metrics: createMetrics(),
      logger: createLogger('silent'),
    });
    const gaveUp = permits.acquire('order-lookup', { ...run, deadline: 2_000 }, () => clock);
    await new Promise((r) => setTimeout(r, 10));
    expect([...permits.waiters()]).toHaveLength(1);
    clock = 2_000;
    await expect(gaveUp).rejects.toThrow('no permit before the deadline');
    expect([...permits.waiters()]).toEqual([]);
  });
});

describe('leasesPerRun', () => {
  it('counts a run lease and one call, or an agent\'s parallel tool calls when they are more', () => {
    expect(leasesPerRun({ wf: { steps: [{ kind: 'llm' }, { kind: 'tool' }] } })).toBe(2);
    expect(leasesPerRun({ a: { steps: [{ kind: 'agent', bounds: { maxParallelTools: 6 } }] }, b: { steps: [{ kind: 'agent', bounds: { maxParallelTools: 3 } }] } })).toBe(7);
    expect(leasesPerRun(loadConfig({ env: {} }).workflows)).toBe(5);
  });
});
