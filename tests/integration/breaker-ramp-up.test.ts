import type { RedisClient } from '../../src/redis/client.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BreakerBoard } from '../../src/breakers/breaker-board.js';
import { BreakerStore } from '../../src/breakers/breaker-store.js';
import { rampUpShares } from '../../src/breakers/ramp-up-shares.js';
import { loadConfig } from '../../src/config/load.js';
import { rampUpShare } from '../../src/config/ramp-up.js';
import type { LlmDependencyConfig } from '../../src/config/schema.js';
import { createProviderSim, type ProviderSimStats } from '../../src/dev/sim/provider-sim.js';
import { CallGuard } from '../../src/execution/call-guard.js';
import { createLogger } from '../../src/obs/logger.js';
import { createMetrics } from '../../src/obs/metrics.js';
import { LeaseKeeper } from '../../src/permits/lease-keeper.js';
import { limitAtShare } from '../../src/util/limit-share.js';
import { PermitStore } from '../../src/permits/permit-store.js';
import { PermitWakeups } from '../../src/permits/permit-wakeups.js';
import { RedisDependencyPermits } from '../../src/permits/run-permits.js';
import { redisKeys } from '../../src/redis/keys.js';
import { LuaScripts } from '../../src/redis/scripts.js';
import { callLlm, createAnthropicClient } from '../../src/steps/llm-call.js';
import { freePort } from '../../src/util/free-port.js';
import { sha256Hex } from '../../src/util/sha256-hex.js';
import { batchRunNow, eventually, testNamespace } from './harness.js';
import { connectRedis, deleteMatching } from './lua/redis-clients.js';

/**
 * A dependency's breaker closes while a backlog of calls waits for it, on two processors (each
 * its own Redis connections, breaker board and permit source): the calls that reach the provider
 * simulator stay within the ramped cap at every moment, on both processors together, and the cap
 * does grow back to the whole of it.
 */
const DEP = 'anthropic';
const CAP = 8;
const RAMP = { initialFraction: 0.25, stepFraction: 0.25, intervalMs: 1_000 };
const LATENCY_MS = 150;
const BACKLOG = 60;
const namespace = testNamespace('ramp-up');
const logger = createLogger('silent');

const config = loadConfig({ env: {} });
config.namespace = namespace;
const dep = config.dependencies[DEP] as LlmDependencyConfig;
dep.maxConcurrency = CAP;
dep.breaker = { ...dep.breaker, minimumCalls: 1, failureThreshold: 1, openMs: 300, halfOpenProbes: 1, halfOpenSuccesses: 1, rampUp: RAMP };
const keys = redisKeys(namespace);

interface Processor {
  redis: RedisClient;
  board: BreakerBoard;
  store: BreakerStore;
  guard: CallGuard;
  close(): Promise<void>;
}

async function processor(): Promise<Processor> {
  const redis = connectRedis();
  const scripts = new LuaScripts(redis);
  const board = new BreakerBoard(redis, keys, { dependencies: [DEP], pollMs: 500, logger });
  await board.start();
  const wakeups = new PermitWakeups(redis, { channel: keys.permitReleased(), logger, fallbackPollMs: 100 });
  await wakeups.start();
  const permitStore = new PermitStore(scripts, keys);
  const keeper = new LeaseKeeper(permitStore, { ttlMs: 30_000, maxLeases: 1_000, logger });
  const permits = new RedisDependencyPermits({ config, keys, store: permitStore, keeper, wakeups, metrics: createMetrics(), logger }, rampUpShares(config, board));
  const store = new BreakerStore(scripts, keys, (d) => config.dependencies[d]?.breaker);
  const guard = new CallGuard({ config, breakers: store, board, dependencyPermits: permits, logger, now: Date.now });
  return {
    redis,
    board,
    store,
    guard,
    close: async () => {
      keeper.stop();
      await wakeups.close();
      await board.close();
      await redis.quit();
    },
  };
}

describe('a breaker closing with a held backlog', () => {
  const ADMIN_KEY = 'ramp-admin';
  const sim = createProviderSim({ adminKeySha256: sha256Hex(ADMIN_KEY), logger, tools: [], defaults: { anthropic: { latencyMs: LATENCY_MS, jitterMs: 0 } } });
  let simUrl: string;
  let processors: Processor[];

  beforeAll(async () => {
    const port = await freePort();
    await sim.listen({ host: '127.0.0.1', port });
    simUrl = `http://127.0.0.1:${port}`;
    processors = [await processor(), await processor()];
  });

  afterAll(async () => {
    for (const p of processors ?? []) await p.close();
    await sim.close();
    const r = connectRedis();
    await deleteMatching(r, `${namespace}*`);
    await r.quit();
  });

  it('lets calls reach the provider only within the ramped cap, on both processors together, until the whole cap is back', async () => {
    const [a, b] = processors as [Processor, Processor];
    const client = createAnthropicClient({ apiKey: undefined, baseUrl: simUrl });
    const request = { dependency: DEP, config: dep, system: 's', messages: [{ role: 'user' as const, content: 'u' }], tenantId: 'tenant-a', timeoutMs: 10_000, headers: {} };

    // Trip the breaker, then close it with one successful probe.
    await a.guard.record(DEP, undefined, 'failure', 1);
    await eventually(async () => (a.board.view(DEP).state === 'open' && b.board.view(DEP).state === 'open' ? true : undefined), 3_000, 'both boards see the trip', 10);
    const probe = await eventually(async () => a.guard.admit(batchRunNow(), DEP, 'probe').catch(() => undefined), 3_000, 'a probe admitted', 50);
    expect(probe).toBe('probe');

    // The backlog: callers on both processors waiting for the close, as held runs are.
    const closed = (p: Processor) => new Promise<void>((resolve) => {
      const off = p.board.onChange((next) => {
        if (next.state === 'closed') {
          off();
          resolve();
        }
      });
    });
    let inFlight = 0;
    const samples: { sinceClose: number; inFlight: number }[] = [];
    const call = async (p: Processor, closedAt: () => number) => {
      const r = batchRunNow();
      await p.guard.admit(r, DEP, `${r.runId}:call`);
      const release = await p.guard.takePermit(r, DEP);
      inFlight++;
      samples.push({ sinceClose: Date.now() - closedAt(), inFlight });
      try {
        await callLlm(client, request);
      } finally {
        inFlight--;
        await release();
      }
    };
    const backlog = [a, b].flatMap((p) => {
      const seen = closed(p);
      const closedAt = () => p.board.view(DEP).closedAt!;
      return Array.from({ length: BACKLOG / 2 }, () => seen.then(() => call(p, closedAt)));
    });
    await a.guard.record(DEP, 'probe', 'success', 1);
    await Promise.all(backlog);

    const limitAt = (ms: number) => limitAtShare(CAP, rampUpShare(RAMP, ms));
    for (const s of samples) expect(s.inFlight, `${s.inFlight} calls in flight ${s.sinceClose} ms after the close`).toBeLessThanOrEqual(limitAt(s.sinceClose));
    const peakIn = (from: number, to: number) => Math.max(0, ...samples.filter((s) => s.sinceClose >= from && s.sinceClose < to).map((s) => s.inFlight));
    expect(peakIn(0, RAMP.intervalMs)).toBe(limitAt(0));
    expect(Math.max(...samples.map((s) => s.inFlight))).toBeGreaterThan(limitAt(RAMP.intervalMs));

    const stats = (await (await fetch(`${simUrl}/admin/stats`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } })).json()) as ProviderSimStats;
    expect(stats.calls[DEP]).toBe(BACKLOG);
    expect(stats.maxConcurrent.byTarget[DEP]).toBeLessThanOrEqual(CAP);
  }, 30_000);
});
