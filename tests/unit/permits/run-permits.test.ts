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

describe('leasesPerRun', () => {
  it('counts a run lease and one call, or an agent\'s parallel tool calls when they are more', () => {
    expect(leasesPerRun({ wf: { steps: [{ kind: 'llm' }, { kind: 'tool' }] } })).toBe(2);
    expect(leasesPerRun({ a: { steps: [{ kind: 'agent', bounds: { maxParallelTools: 6 } }] }, b: { steps: [{ kind: 'agent', bounds: { maxParallelTools: 3 } }] } })).toBe(7);
    expect(leasesPerRun(loadConfig({ env: {} }).workflows)).toBe(5);
  });
});
