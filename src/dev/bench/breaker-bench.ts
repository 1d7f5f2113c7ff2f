import { Redis } from 'ioredis';
import { BreakerBoard } from '../../breakers/breaker-board.js';
import { BreakerStore } from '../../breakers/breaker-store.js';
import type { SluiceConfig } from '../../config/schema.js';
import type { RunRequested } from '../../events/schemas.js';
import { infraUp } from '../infra/local-infra.js';
import { createLogger } from '../../obs/logger.js';
import { callLlm, createAnthropicClient, type LlmRequest } from '../../steps/llm-call.js';
import { StepError } from '../../steps/step-error.js';
import { redisKeys } from '../../redis/keys.js';
import { LuaScripts } from '../../redis/scripts.js';
import { deleteKeys } from './bench-redis.js';
import { DEP, bump, llmRequest, oneCallConfig, oneCallRun, runInProcess, sleep, startSim, type DependencyCap, type Sim } from './in-process-sluice.js';

export interface BreakerBenchOptions {
  /** Propagation trials per mode (shared breaker, per-instance breakers). */
  trials: number;
  /** Breaker-holding instances in the propagation trials. */
  instances: number;
  /** Offered runs per second in the amplification phase. */
  rate: number;
  /** Seconds of arrivals in the amplification phase; the fault covers its first `faultSec`. */
  durationSec: number;
  faultSec: number;
  /** Multiplies every duration of the amplification phase (delays, open time, deadline, fault). */
  scale: number;
}

/** A naive client, as teams without Sluice run it: retry after 1, 2, 4 and 8 s, whatever the error. */
const NAIVE_DELAYS_SEC = [1, 2, 4, 8];
const CALLERS_PER_INSTANCE = 2;
const TRIAL_TIMEOUT_MS = 10_000;
const DRAIN_TIMEOUT_MS = 120_000;

const percentile = (sorted: readonly number[], p: number) => (sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!);

/** The paced mode's rate limit, as a multiple of the offered rate, and its burst (both in scaled time). */
const PACED_RATE_SHARE = 1.2;
const PACED_BURST_SEC = 0.25;

/**
 * `pacedAt`: runs offered per second, for the mode that paces calls at a rate limit a little above
 * it (which its ramp-up scales after the close); otherwise no pacing: pacing learnt from the
 * storm's 429s is measured by pacing-bench.ts, here the breaker and budget alone.
 */
function benchConfig(namespace: string, scale: number, pacedAt?: number): SluiceConfig {
  const config = oneCallConfig(namespace);
  config.processor.pacing.enabled = pacedAt !== undefined;
  const dep = config.dependencies[DEP]!;
  if (pacedAt !== undefined) dep.rateLimit = { requestsPerSecond: (PACED_RATE_SHARE * pacedAt) / scale, burstSeconds: PACED_BURST_SEC * scale };
  dep.timeouts = { connectMs: 3_000, readMs: 10_000, totalMs: 10_000 };
  dep.breaker.openMs = Math.round(5_000 * scale);
  if (dep.breaker.rampUp) dep.breaker.rampUp = { ...dep.breaker.rampUp, intervalMs: Math.max(100, Math.round(dep.breaker.rampUp.intervalMs * scale)) };
  dep.retry = { ...dep.retry, baseMs: Math.round(500 * scale), capMs: Math.round(2_000 * scale) };
  config.processor.runRetry = { maxAttempts: 3, baseMs: Math.round(1_000 * scale), capMs: Math.round(30_000 * scale) };
  return config;
}

// ---------------------------------------------------------------------------------------------
// Part 1: from the first failing call to every instance holding back, shared vs per-instance.

interface Instance {
  redis: Redis;
  store: BreakerStore;
  board: BreakerBoard;
}

/** One trial; resolves to ms from the first failed call until every instance stopped calling. */
async function propagationTrial(mode: 'shared' | 'local', instances: Instance[], config: SluiceConfig, simUrl: string): Promise<number> {
  const policy = config.dependencies[DEP]!.breaker;
  const client = createAnthropicClient({ apiKey: undefined, baseUrl: simUrl });
  const request = llmRequest(config, 'bench', 5_000);
  let firstFailure: number | undefined;
  const stoppedAt: (number | undefined)[] = instances.map(() => undefined);
  const localFailures = instances.map(() => 0);
  const unsubscribe = instances.map((inst, i) =>
    inst.board.onChange((next) => {
      if (mode === 'shared' && next.state === 'open') stoppedAt[i] ??= Date.now();
    }),
  );
  const deadline = Date.now() + TRIAL_TIMEOUT_MS;
  let seq = 0;
  const caller = async (i: number) => {
    const inst = instances[i]!;
    while (stoppedAt[i] === undefined && Date.now() < deadline) {
      const token = `trial:${i}:${seq++}`;
      if (mode === 'shared' && !(await inst.store.admit(DEP, token)).allowed) return;
      const started = Date.now();
      try {
        await callLlm(client, request);
        if (mode === 'shared') await inst.store.record(DEP, undefined, 'success', Date.now() - started);
      } catch (err) {
        if (!(err instanceof StepError)) throw err;
        firstFailure ??= Date.now();
        if (mode === 'shared') await inst.store.record(DEP, undefined, 'failure', Date.now() - started);
        else if (++localFailures[i]! >= policy.failureThreshold) stoppedAt[i] ??= Date.now();
      }
    }
  };
  await Promise.all(instances.flatMap((_, i) => Array.from({ length: CALLERS_PER_INSTANCE }, () => caller(i))));
  // The last instance may learn of the trip after its callers already returned on a refusal.
  while (mode === 'shared' && stoppedAt.some((t) => t === undefined) && Date.now() < deadline) await sleep(1);
  for (const u of unsubscribe) u();
  if (firstFailure === undefined || stoppedAt.some((t) => t === undefined)) throw new Error(`${mode} trial: not every instance stopped within ${TRIAL_TIMEOUT_MS} ms`);
  return Math.max(...(stoppedAt as number[])) - firstFailure;
}

async function benchPropagation(opts: BreakerBenchOptions, redisUrl: string, simUrl: string, setFault: (f: object | null) => Promise<void>): Promise<void> {
  const namespace = `bench-breaker-${Date.now()}-`;
  const keys = redisKeys(namespace);
  const config = benchConfig(namespace, 1);
  const logger = createLogger('silent');
  const instances: Instance[] = [];
  for (let i = 0; i < opts.instances; i++) {
    const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1, commandTimeout: 5_000 });
    const board = new BreakerBoard(redis, keys, { dependencies: [DEP], pollMs: 500, logger });
    await board.start();
    instances.push({ redis, store: new BreakerStore(new LuaScripts(redis), keys, (d) => config.dependencies[d]?.breaker), board });
  }
  await setFault({ errorStatus: 429, errorRate: 1, retryAfterSec: 1 });
  const results = { shared: [] as number[], local: [] as number[] };
  try {
    for (let t = 0; t < opts.trials; t++) {
      for (const mode of ['shared', 'local'] as const) {
        await deleteKeys(instances[0]!.redis, `${namespace}*`);
        // Every board must see the reset (closed) before the next trial starts: a read already in
        // flight may predate the reset, so read once more after it.
        for (let r = 0; r < 2; r++) await Promise.all(instances.map((i) => i.board.refresh()));
        results[mode].push(await propagationTrial(mode, instances, config, simUrl));
      }
    }
  } finally {
    await setFault(null);
    await deleteKeys(instances[0]!.redis, `${namespace}*`);
    for (const i of instances) {
      await i.board.close();
      await i.redis.quit();
    }
  }
  const line = (label: string, xs: number[], base?: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    const b = base ? [...base].sort((a, c) => a - c) : undefined;
    const ratio = b ? `${(percentile(s, 50) / percentile(b, 50)).toFixed(2)}x ${(percentile(s, 99) / percentile(b, 99)).toFixed(2)}x` : '    -     -';
    return `  ${label.padEnd(44)} ${percentile(s, 50).toFixed(1).padStart(7)} ${percentile(s, 99).toFixed(1).padStart(7)} ${s.at(-1)!.toFixed(1).padStart(7)}   ${ratio}`;
  };
  process.stdout.write(
    `\nfirst failing call -> every instance stops calling (${opts.instances} instances x ${CALLERS_PER_INSTANCE} callers, 429 on every call, ${opts.trials} trials each, ms)\n` +
      `  ${'mode'.padEnd(44)}     p50     p99     max   ratio p50/p99 vs baseline\n` +
      `${line('per-instance breakers (baseline)', results.local)}\n` +
      `${line('shared breaker (Redis Lua + pub/sub)', results.shared, results.local)}\n`,
  );
}

// ---------------------------------------------------------------------------------------------
// Part 2: calls per offered run during a provider 429 storm, naive retries vs Sluice's policy.

interface ModeResult {
  calls: number[];
  outcomes: Map<string, number>;
  /** The most calls in flight at once at the provider after the fault. */
  maxConcurrentAfter?: number;
}

/** The naive client: every failure is retried after 1, 2, 4, 8 s, no breaker, no budget. */
async function naiveRun(client: ReturnType<typeof createAnthropicClient>, req: LlmRequest, scale: number, calls: number[], outcomes: Map<string, number>): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    calls.push(Date.now());
    try {
      await callLlm(client, req);
      bump(outcomes, 'completed');
      return;
    } catch (err) {
      if (!(err instanceof StepError)) throw err;
      const delay = NAIVE_DELAYS_SEC[attempt];
      if (delay === undefined) {
        bump(outcomes, 'failed after 5 attempts');
        return;
      }
      await sleep(delay * 1_000 * scale);
    }
  }
}

async function benchAmplification(opts: BreakerBenchOptions, redisUrl: string): Promise<void> {
  const sims = await Promise.all(Array.from({ length: 5 }, () => startSim({ latencyMs: 50, jitterMs: 5 })));
  const [naiveSim, ...sluiceSims] = sims as [Sim, Sim, Sim, Sim, Sim];
  const config = benchConfig(`bench-amplify-${Date.now()}-`, opts.scale);
  const total = Math.round(opts.rate * opts.durationSec);
  const deadlineMs = Math.round(30_000 * opts.scale);
  const gapMs = 1_000 / opts.rate;
  const started = Date.now();
  const faultEnds = started + opts.faultSec * 1_000 * opts.scale;
  // Open loop: runs arrive on schedule whatever happens to earlier ones.
  async function* arrivals(): AsyncGenerator<RunRequested> {
    for (let i = 0; i < total; i++) {
      await sleep(Math.max(0, started + i * gapMs * opts.scale - Date.now()));
      yield oneCallRun('tenant-a', 'interactive', deadlineMs);
    }
  }
  await Promise.all(sims.map((s) => s.setFault({ errorStatus: 429, errorRate: 1, retryAfterSec: 1 })));
  // From the end of the fault on, each simulator counts its peak of calls in flight afresh.
  const lift = sleep(faultEnds - Date.now()).then(() => Promise.all(sims.map(async (s) => (await s.setFault(null), await s.resetStats()))));
  const naive: ModeResult = { calls: [], outcomes: new Map() };
  const naiveClient = createAnthropicClient({ apiKey: undefined, baseUrl: naiveSim.url });
  const naiveReq = llmRequest(config, 'tenant-a', 10_000);
  const naiveDone = (async () => {
    const runs: Promise<void>[] = [];
    for await (const _ of arrivals()) runs.push(naiveRun(naiveClient, naiveReq, opts.scale, naive.calls, naive.outcomes));
    await Promise.all(runs);
  })();
  const modes: { cap: DependencyCap; paced: boolean }[] = [
    { cap: 'none', paced: false },
    { cap: 'cap', paced: false },
    { cap: 'ramp', paced: false },
    { cap: 'ramp', paced: true },
  ];
  // Each mode its own namespace, so their breakers, permits and rate limits are apart.
  const sluiceResults: ModeResult[] = await Promise.all(
    modes.map(({ cap, paced }, i) =>
      runInProcess({ config: benchConfig(`${config.namespace}${cap}${paced ? '-paced' : ''}-`, opts.scale, paced ? opts.rate : undefined), cap, redisUrl, simUrl: sluiceSims[i]!.url, runs: arrivals, drainTimeoutMs: DRAIN_TIMEOUT_MS }),
    ),
  );
  const [uncapped, capped, ramped, paced] = sluiceResults as [ModeResult, ModeResult, ModeResult, ModeResult];
  await naiveDone;
  await lift;
  const [naivePeak, ...sluicePeaks] = await Promise.all(sims.map((s) => s.maxConcurrent()));
  naive.maxConcurrentAfter = naivePeak;
  sluiceResults.forEach((r, i) => (r.maxConcurrentAfter = sluicePeaks[i]));
  await Promise.all(sims.map((s) => s.close()));

  const faultMs = opts.faultSec * 1_000 * opts.scale;
  const describe = (label: string, r: ModeResult, base?: ModeResult) => {
    const during = r.calls.filter((t) => t < faultEnds).length;
    const after = r.calls.length - during;
    // The busiest (scaled) second after the fault, against the runs offered in one: a wave shows as > 1.
    const windowMs = 1_000 * opts.scale;
    let peak = 0;
    for (const t of r.calls) if (t >= faultEnds) peak = Math.max(peak, r.calls.filter((u) => u >= t && u < t + windowMs).length);
    const amp = r.calls.length / total;
    const ratio = base ? `${(amp / (base.calls.length / total)).toFixed(2)}x` : '    -';
    // From the end of the fault to the last call: how long the backlog took to reach the provider.
    const drainSec = after === 0 ? 0 : (Math.max(...r.calls) - faultEnds) / 1_000;
    const outcomes = [...r.outcomes].map(([k, n]) => `${k}: ${n}`).join(', ');
    return `  ${label.padEnd(40)} ${String(r.calls.length).padStart(6)} ${amp.toFixed(2).padStart(7)} ${String(during).padStart(8)} ${String(after).padStart(7)} ${(peak / opts.rate).toFixed(2).padStart(9)}x ${drainSec.toFixed(1).padStart(7)} ${String(r.maxConcurrentAfter ?? '-').padStart(8)}  ${ratio.padStart(7)}   ${outcomes}`;
  };
  const ramp = config.dependencies[DEP]!.breaker.rampUp;
  process.stdout.write(
    `\ncall amplification: ${total} runs offered at ${opts.rate}/s (time x${opts.scale}), every LLM call answered 429 for the first ${(faultMs / 1000).toFixed(1)} s, one LLM call per run when healthy\n` +
      `  ${'policy'.padEnd(40)}  calls per-run in-fault   after  peak-after drain-s in-flight  vs base   outcomes\n` +
      `${describe('naive 1/2/4/8 s retries (baseline)', naive)}\n` +
      `${describe('Sluice (breaker + budget + jitter)', uncapped, naive)}\n` +
      `${describe(`  + dependency cap ${config.dependencies[DEP]!.maxConcurrency}`, capped, naive)}\n` +
      `${describe(`  + cap ${config.dependencies[DEP]!.maxConcurrency}, slow start`, ramped, naive)}\n` +
      `${describe(`  + slow start, paced at ${PACED_RATE_SHARE}x offered`, paced, naive)}\n` +
      `  (peak-after: the most calls in one ${opts.scale} s window after the fault, as a multiple of the runs offered per window;\n` +
      `   drain-s: seconds from the end of the fault to the last call; in-flight: the most calls at once at the provider after the fault; slow start: ${ramp ? `${ramp.initialFraction} of the cap, +${ramp.stepFraction} every ${ramp.intervalMs} ms` : 'none configured'};\n` +
      `   paced: pacing on with rateLimit ${PACED_RATE_SHARE}x the offered rate, burst ${PACED_BURST_SEC} s, both scaled by the slow start's share after the close)\n`,
  );
}

export async function benchBreaker(opts: BreakerBenchOptions): Promise<void> {
  const infra = await infraUp({ stateDir: process.env.SLUICE_STATE_DIR ?? '.sluice', logger: createLogger('warn') });
  const sim = await startSim({ latencyMs: 20, jitterMs: 5 });
  try {
    await benchPropagation(opts, infra.redisUrl, sim.url, sim.setFault);
  } finally {
    await sim.close();
  }
  await benchAmplification(opts, infra.redisUrl);
}
