import type { RedisClient } from '../../src/redis/client.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import type { LlmDependencyConfig, StepConfig } from '../../src/config/schema.js';
import { createProviderSim, type ProviderSimStats } from '../../src/dev/sim/provider-sim.js';
import { CallGuard } from '../../src/execution/call-guard.js';
import { AttemptCalls } from '../../src/execution/goodput.js';
import { StepCaller } from '../../src/execution/step-caller.js';
import { ToolConnections } from '../../src/steps/tool-connections.js';
import { createLogger } from '../../src/obs/logger.js';
import { createMetrics } from '../../src/obs/metrics.js';
import { AdaptiveLimitStore } from '../../src/permits/adaptive-limit-store.js';
import { LeaseKeeper } from '../../src/permits/lease-keeper.js';
import { registerPermitGauges } from '../../src/permits/permit-metrics.js';
import { PermitStore } from '../../src/permits/permit-store.js';
import { PermitWakeups } from '../../src/permits/permit-wakeups.js';
import { RedisDependencyPermits } from '../../src/permits/run-permits.js';
import { redisKeys } from '../../src/redis/keys.js';
import { LuaScripts } from '../../src/redis/scripts.js';
import { RetryBudgets } from '../../src/retries/retry-budget.js';
import { createAnthropicClient, callLlm } from '../../src/steps/llm-call.js';
import { StepError } from '../../src/steps/step-error.js';
import { freePort } from '../../src/util/free-port.js';
import { sha256Hex } from '../../src/util/sha256-hex.js';
import { batchRunNow, testNamespace } from './harness.js';
import { connectRedis, deleteMatching } from './lua/redis-clients.js';

/**
 * Two processors (each its own Redis connections and permit source) call the provider simulator
 * through StepCaller, as a run's LLM step does. While the simulator answers 429 the shared
 * adaptive figure drops, once per burst; once it answers again the figure grows back to the
 * permit limit, and `sluice_dependency_limit` shows it all along. The breaker is left out (always
 * closed here): the figure alone is under test.
 */
const DEP = 'anthropic';
const CAP = 8;
const LATENCY_MS = 40;
const COOLDOWN_MS = 1_500;
const namespace = testNamespace('adaptive');
const logger = createLogger('silent');
const ADMIN_KEY = 'adaptive-admin';

const config = loadConfig({ env: {} });
config.namespace = namespace;
const dep = config.dependencies[DEP] as LlmDependencyConfig;
dep.maxConcurrency = CAP;
dep.retry = { ...dep.retry, maxAttempts: 1 };
dep.adaptiveConcurrency = { min: 1, decreaseFactor: 0.5, cooldownMs: COOLDOWN_MS, idleResetMs: 60_000 };
const keys = redisKeys(namespace);
const step = config.workflows['support-reply']!.steps.find((s): s is StepConfig & { kind: 'llm' } => s.kind === 'llm')!;

interface Processor {
  caller: StepCaller;
  close(): Promise<void>;
}

async function processor(simUrl: string): Promise<Processor> {
  const redis = connectRedis();
  const scripts = new LuaScripts(redis);
  const wakeups = new PermitWakeups(redis, { channel: keys.permitReleased(), logger, fallbackPollMs: 100 });
  await wakeups.start();
  const permitStore = new PermitStore(scripts, keys);
  const keeper = new LeaseKeeper(permitStore, { ttlMs: 30_000, maxLeases: 1_000, logger });
  const metrics = createMetrics();
  const permits = new RedisDependencyPermits({ config, keys, store: permitStore, keeper, wakeups, metrics, logger });
  const guard = new CallGuard({
    config,
    breakers: { admit: async () => ({ allowed: true, probe: false }), record: async () => ({ state: 'closed', changed: false }), tally: async () => true },
    board: { view: (name) => ({ name, state: 'closed' }), live: () => true },
    dependencyPermits: permits,
    adaptiveLimits: new AdaptiveLimitStore(scripts, keys),
    logger,
    now: Date.now,
  });
  const client = createAnthropicClient({ apiKey: undefined, baseUrl: simUrl });
  const tools = new ToolConnections();
  const caller = new StepCaller({ config, llm: (req) => callLlm(client, req), tool: (req) => tools.call(req), simulatorUrl: simUrl, guard, calls: new AttemptCalls(), retryBudgets: new RetryBudgets(), metrics, logger, now: Date.now, random: Math.random });
  return {
    caller,
    close: async () => {
      tools.close();
      keeper.stop();
      await wakeups.close();
      await redis.quit();
    },
  };
}

describe('adaptive concurrency against the provider simulator', () => {
  const sim = createProviderSim({ adminKeySha256: sha256Hex(ADMIN_KEY), logger, tools: [], defaults: { anthropic: { latencyMs: LATENCY_MS, jitterMs: 0 } } });
  let simUrl: string;
  let processors: Processor[];
  let gaugeRedis: RedisClient;
  const gauges = createMetrics();

  const admin = async (path: string, init: RequestInit = {}) => {
    const res = await fetch(`${simUrl}${path}`, { ...init, headers: { authorization: `Bearer ${ADMIN_KEY}`, ...(init.body !== undefined && { 'content-type': 'application/json' }) } });
    expect(res.ok, `${init.method ?? 'GET'} ${path}: ${res.status}`).toBe(true);
    return res;
  };
  /** `sluice_dependency_limit{dependency="anthropic"}` as a scrape shows it. */
  const shownLimit = async () => {
    await gauges.scrapeCollectors.collect();
    const line = (await gauges.registry.metrics()).split('\n').find((l) => l.startsWith(`sluice_dependency_limit{dependency="${DEP}"}`));
    return Number(line?.split(' ')[1]);
  };
  /** `count` LLM steps spread over both processors at once; resolves to how each ended. */
  const burst = (count: number) =>
    Promise.all(
      Array.from({ length: count }, (_, i) =>
        processors[i % 2]!.caller.call(batchRunNow(), step, {}, {}).then(
          () => 'ok',
          (err: unknown) => (err instanceof StepError ? String(err.status ?? err.kind) : String(err)),
        ),
      ),
    );

  beforeAll(async () => {
    const port = await freePort();
    await sim.listen({ host: '127.0.0.1', port });
    simUrl = `http://127.0.0.1:${port}`;
    processors = [await processor(simUrl), await processor(simUrl)];
    gaugeRedis = connectRedis();
    registerPermitGauges(gauges, gaugeRedis, keys, config);
  });

  afterAll(async () => {
    for (const p of processors ?? []) await p.close();
    await sim.close();
    await deleteMatching(gaugeRedis, `${namespace}*`);
    await gaugeRedis.quit();
  });

  it('drops the shared limit once per overload burst while the provider answers 429, and grows it back once it answers', async () => {
    expect(await shownLimit()).toBe(CAP);

    await admin('/admin/faults', { method: 'PUT', body: JSON.stringify({ target: DEP, errorStatus: 429, errorRate: 1, retryAfterSec: 1 }) });
    // 16 calls at a cap of 8 end well within the cooldown: one cut for all of them.
    expect(new Set(await burst(16))).toEqual(new Set(['429']));
    expect(await shownLimit()).toBe(CAP / 2);
    await new Promise((r) => setTimeout(r, COOLDOWN_MS + 50));
    expect(new Set(await burst(8))).toEqual(new Set(['429']));
    expect(await shownLimit()).toBe(CAP / 4);

    await admin('/admin/faults', { method: 'DELETE' });
    await admin('/admin/stats/reset', { method: 'POST' });
    const startedAt = Date.now();
    const shown: number[] = [];
    // Waves of calls keep the dependency busy while the figure grows, one permit per figure's worth of successes.
    while (shown.at(-1) !== CAP) {
      expect(new Set(await burst(16))).toEqual(new Set(['ok']));
      shown.push(await shownLimit());
      expect(Date.now() - startedAt, `the limit shown after each wave: ${shown.join(', ')}`).toBeLessThan(20_000);
    }
    expect(shown.every((limit, i) => i === 0 || limit >= shown[i - 1]!)).toBe(true);
    expect(shown[0]).toBeLessThan(CAP);
    const stats = (await (await admin('/admin/stats')).json()) as ProviderSimStats;
    expect(stats.maxConcurrent.byTarget[DEP]).toBeLessThanOrEqual(CAP);
  }, 40_000);
});
