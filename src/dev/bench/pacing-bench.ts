import type { LlmDependencyConfig, SluiceConfig } from '../../config/schema.js';
import type { RunRequested } from '../../events/schemas.js';
import { callLlm, createAnthropicClient } from '../../steps/llm-call.js';
import { StepError } from '../../steps/step-error.js';
import type { RateLimit } from '../sim/fault-profile.js';
import { DEP, llmRequest, oneCallConfig, oneCallRun, runInProcess, sleep, startSim, type InProcessResult, type Sim } from './in-process-sluice.js';
import { seededRandom } from '../../util/seeded-random.js';
import { latencySummary, type LatencySummary } from './latency-summary.js';
import { arrivalPlan, rateFigures, type RateFigures } from './pacing-figures.js';

export interface PacingBenchOptions {
  /** The provider's request limit per minute (R). */
  rpm: number;
  /** Seconds of arrivals. */
  seconds: number;
  /** Offered runs per second as a multiple of R's per second. */
  load: number;
  /** Seed of the arrivals' tenants and classes. */
  seed: number;
  /** Upper bound on one phase: arrivals, then the drain of what is left. */
  phaseTimeoutSec: number;
}

/** Input tokens allowed per request (calls here use about a dozen): the token limits are set but do not bind. */
const INPUT_TOKENS_PER_REQUEST = 100;
/** Output tokens allowed per request, as a multiple of max_tokens, which a call holds at the provider while it runs. */
const OUTPUT_ALLOWANCE_PER_REQUEST = 2;
const SIM_LATENCY = { latencyMs: 50, jitterMs: 20 };
/** Calls at once while the simulator's request bucket is emptied before a phase. */
const EXHAUST_CONCURRENCY = 32;

/** The provider's limits, the same in the simulator and, with pacing on, in Sluice's config. */
function providerLimits(rpm: number, maxTokens: number): Required<Pick<RateLimit, 'requestsPerMinute' | 'inputTokensPerMinute' | 'outputTokensPerMinute'>> {
  return { requestsPerMinute: rpm, inputTokensPerMinute: rpm * INPUT_TOKENS_PER_REQUEST, outputTokensPerMinute: rpm * maxTokens * OUTPUT_ALLOWANCE_PER_REQUEST };
}

function benchConfig(namespace: string, pacing: boolean, limits: ReturnType<typeof providerLimits>): SluiceConfig {
  const config = oneCallConfig(namespace);
  config.processor.pacing.enabled = pacing;
  // Off, Sluice is not told the limits: it learns of them from 429s alone.
  if (pacing) config.dependencies[DEP]!.rateLimit = { ...limits, burstSeconds: 1 };
  return config;
}

/**
 * Empties the simulator's request bucket, which starts with a whole minute's allowance as a
 * provider's does after idling: a phase then starts at the limit, as traffic does that has been
 * at it, instead of spending the first minute's burst. Calls go until one is refused.
 */
async function exhaustRequests(sim: Sim, config: SluiceConfig, rpm: number): Promise<void> {
  const client = createAnthropicClient({ apiKey: undefined, baseUrl: sim.url });
  const request = llmRequest(config, 'bench', 5_000);
  let left = rpm * 2;
  let refused = false;
  const caller = async () => {
    while (!refused && left-- > 0) {
      try {
        await callLlm(client, request);
      } catch (err) {
        if (!(err instanceof StepError)) throw err;
        if (err.status === 429) refused = true;
      }
    }
  };
  await Promise.all(Array.from({ length: EXHAUST_CONCURRENCY }, caller));
  if (!refused) throw new Error(`the simulator's request limit of ${rpm}/min was not reached in ${rpm * 2} calls`);
}

interface ModeFigures extends RateFigures {
  label: string;
  calls: number;
  rateLimited: number;
  successes: number;
  outcomes: Map<string, number>;
  interactive: LatencySummary;
  batch: LatencySummary;
  /** Runs of each class offered, to read the latencies' counts against. */
  offered: { interactive: number; batch: number };
  /** From the last arrival to the last run's end. */
  drainSec: number;
  breakerOpenings: number;
  unfinished: number;
}

const OUTCOME_COLUMNS = [
  ['completed', 'completed'],
  ['degraded', 'completed degraded (fallback)'],
  ['expired', 'expired'],
  ['failed', 'failed'],
] as const;

function figures(label: string, r: InProcessResult, stats: { calls: number; rateLimited: number }, offered: ModeFigures['offered'], window: { started: number; arrivalsEnd: number }, opts: PacingBenchOptions): ModeFigures {
  const { started, arrivalsEnd } = window;
  // End to end for the runs answered by the provider; a stand-in answer or a failure is counted in the outcomes.
  const answered = (cls: RunRequested['class']) => r.finished.filter((f) => f.outcome === 'completed' && f.run.class === cls).map((f) => f.at - f.run.admittedAt);
  const lastEnd = Math.max(arrivalsEnd, ...r.finished.map((f) => f.at));
  return {
    label,
    ...stats,
    successes: r.successes.length,
    ...rateFigures({ ...stats, successesAt: r.successes, windowStart: started, windowMs: opts.seconds * 1_000, requestsPerMinute: opts.rpm }),
    outcomes: r.outcomes,
    interactive: latencySummary(answered('interactive')),
    batch: latencySummary(answered('batch')),
    offered,
    drainSec: (lastEnd - arrivalsEnd) / 1_000,
    breakerOpenings: r.breakerOpenings,
    unfinished: r.unfinished,
  };
}

const sec = (ms: number) => (Number.isNaN(ms) ? '-' : (ms / 1_000).toFixed(2));
const share = (part: number, whole: number) => (whole === 0 ? '-' : `${((part / whole) * 100).toFixed(0)}%`);
const ratio = (on: number, off: number) => (Number.isFinite(on / off) ? `${(on / off).toFixed(2)}x` : '-');

function table(off: ModeFigures, on: ModeFigures): string {
  const head = `  ${'mode'.padEnd(12)} ${'calls'.padStart(6)} ${'429s'.padStart(6)} ${'429%'.padStart(6)} ${'opens'.padStart(5)} ${'ok'.padStart(6)} ${'ok/R'.padStart(5)}  ${OUTCOME_COLUMNS.map(([c]) => c.padStart(9)).join(' ')}  ${'int ans'.padStart(7)} ${'int p50'.padStart(7)} ${'int p99'.padStart(7)} ${'bat ans'.padStart(7)} ${'bat p50'.padStart(7)} ${'bat p99'.padStart(7)} ${'drain-s'.padStart(7)}`;
  const row = (m: ModeFigures) =>
    `  ${m.label.padEnd(12)} ${String(m.calls).padStart(6)} ${String(m.rateLimited).padStart(6)} ${(m.rateLimitedShare * 100).toFixed(2).padStart(6)} ${String(m.breakerOpenings).padStart(5)} ${String(m.successes).padStart(6)} ${m.achievedOfLimit.toFixed(2).padStart(5)}  ${OUTCOME_COLUMNS.map(([, k]) => String(m.outcomes.get(k) ?? 0).padStart(9)).join(' ')}  ${share(m.interactive.count, m.offered.interactive).padStart(7)} ${sec(m.interactive.p50).padStart(7)} ${sec(m.interactive.p99).padStart(7)} ${share(m.batch.count, m.offered.batch).padStart(7)} ${sec(m.batch.p50).padStart(7)} ${sec(m.batch.p99).padStart(7)} ${m.drainSec.toFixed(1).padStart(7)}${m.unfinished > 0 ? `  (${m.unfinished} unfinished at the timeout)` : ''}`;
  const ratios = `  ${'on / off'.padEnd(12)} ${ratio(on.calls, off.calls).padStart(6)} ${ratio(on.rateLimited, off.rateLimited).padStart(6)} ${ratio(on.rateLimitedShare, off.rateLimitedShare).padStart(6)} ${ratio(on.breakerOpenings, off.breakerOpenings).padStart(5)} ${ratio(on.successes, off.successes).padStart(6)} ${ratio(on.achievedOfLimit, off.achievedOfLimit).padStart(5)}  ${OUTCOME_COLUMNS.map(([, k]) => ratio(on.outcomes.get(k) ?? 0, off.outcomes.get(k) ?? 0).padStart(9)).join(' ')}  ${ratio(on.interactive.count, off.interactive.count).padStart(7)} ${ratio(on.interactive.p50, off.interactive.p50).padStart(7)} ${ratio(on.interactive.p99, off.interactive.p99).padStart(7)} ${ratio(on.batch.count, off.batch.count).padStart(7)} ${ratio(on.batch.p50, off.batch.p50).padStart(7)} ${ratio(on.batch.p99, off.batch.p99).padStart(7)} ${ratio(on.drainSec, off.drainSec).padStart(7)}`;
  return `${head}\n${row(off)}\n${row(on)}\n${ratios}\n`;
}

/**
 * 429s and achieved call rate with and without pacing: the same seeded open-loop arrivals, at
 * `load` times the provider's request limit, go side by side to two Sluices in this process (real
 * dispatcher, executor, breaker, retry budget and dependency cap over Redis; the retry topic a
 * timer), each against its own simulator enforcing the limit. One paces its calls by the
 * configured limit; the other learns of it from 429s alone.
 */
export async function benchPacing(opts: PacingBenchOptions): Promise<void> {
  const namespace = `bench-pacing-${Date.now()}-`;
  const maxTokens = (oneCallConfig(namespace).dependencies[DEP] as LlmDependencyConfig).maxTokens;
  const limits = providerLimits(opts.rpm, maxTokens);
  const modes = [
    { label: 'pacing off', config: benchConfig(`${namespace}off-`, false, limits) },
    { label: 'pacing on', config: benchConfig(`${namespace}on-`, true, limits) },
  ];
  // Only Redis is needed: no Kafka, no Postgres.
  const redisUrl = process.env.REDIS_URL || modes[0]!.config.redis.url;
  const total = Math.round((opts.rpm / 60) * opts.load * opts.seconds);
  const plan = arrivalPlan(total, seededRandom(opts.seed));
  const interactive = plan.filter((a) => a.class === 'interactive').length;
  const deadlines = modes[0]!.config.api.deadlineMs;
  const gapMs = (opts.seconds * 1_000) / total;
  const phaseMs = opts.phaseTimeoutSec * 1_000;
  // The whole bench stops by itself even if a phase wedges past its own drain bound.
  const watchdog = setTimeout(() => {
    process.stderr.write(`sluice-bench pacing: no result within ${opts.phaseTimeoutSec + 60} s; keys under ${namespace} may be left in Redis\n`);
    process.exit(1);
  }, phaseMs + 60_000);
  watchdog.unref();

  const sims = await Promise.all(modes.map(() => startSim({ ...SIM_LATENCY, rateLimit: limits })));
  try {
    await Promise.all(sims.map((sim, i) => exhaustRequests(sim, modes[i]!.config, opts.rpm)));
    // One second of the limit back, as after a short lull: the provider holds what pacing's burst (1 s) may send at once.
    await sleep(1_000);
    await Promise.all(sims.map((s) => s.resetStats()));
    const started = Date.now();
    const arrivalsEnd = started + opts.seconds * 1_000;
    // Open loop: runs arrive on schedule whatever happens to earlier ones.
    async function* arrivals(): AsyncGenerator<RunRequested> {
      for (const [i, a] of plan.entries()) {
        await sleep(Math.max(0, started + i * gapMs - Date.now()));
        yield oneCallRun(a.tenantId, a.class, a.class === 'interactive' ? deadlines.defaultInteractive : deadlines.defaultBatch);
      }
    }
    const drainTimeoutMs = Math.max(10_000, phaseMs - opts.seconds * 1_000);
    const results = await Promise.all(modes.map((m, i) => runInProcess({ config: m.config, cap: 'ramp', redisUrl, simUrl: sims[i]!.url, runs: arrivals, drainTimeoutMs })));
    const stats = await Promise.all(sims.map(async (s) => s.stats()));
    const [off, on] = modes.map((m, i) => figures(m.label, results[i]!, { calls: stats[i]!.calls[DEP] ?? 0, rateLimited: stats[i]!.rateLimited[DEP] ?? 0 }, { interactive, batch: total - interactive }, { started, arrivalsEnd }, opts)) as [ModeFigures, ModeFigures];
    const dep = modes[1]!.config.dependencies[DEP]!;
    process.stdout.write(
      `\n$ sluice-bench pacing --rpm ${opts.rpm} --seconds ${opts.seconds} --load ${opts.load} --seed ${opts.seed} --phase-timeout ${opts.phaseTimeoutSec}\n` +
        `pacing: ${total} one-call runs offered open-loop over ${opts.seconds} s (${opts.load}x the provider's ${opts.rpm} requests/min), ${interactive} interactive (deadline ${deadlines.defaultInteractive / 1_000} s) and ${total - interactive} batch (${deadlines.defaultBatch / 1_000} s), tenants a/b/c, seed ${opts.seed}\n` +
        `provider limits (simulator, and Sluice's rateLimit with pacing on): ${limits.requestsPerMinute} requests, ${limits.inputTokensPerMinute} input and ${limits.outputTokensPerMinute} output tokens per minute; latency ${SIM_LATENCY.latencyMs}+0..${SIM_LATENCY.jitterMs} ms; request bucket emptied before the phase, then 1 s of it back\n` +
        `Sluice: maxInFlight ${modes[0]!.config.processor.maxInFlight}, cap ${dep.maxConcurrency} with slow start, retry ${dep.retry.maxAttempts} attempts, run retries ${modes[0]!.config.processor.runRetry.maxAttempts}; pacing on: burst 1 s, maxInlineWaitMs ${modes[1]!.config.processor.pacing.maxInlineWaitMs}\n` +
        table(off, on) +
        `  (calls, 429s: as the simulator counted them; opens: times the breaker opened; ok: calls answered; ok/R: answered calls per second during the ${opts.seconds} s of arrivals as a fraction of the limit;\n` +
        `   int/bat ans: share of the runs of that class offered that were answered by the provider; p50/p99: seconds from admission to that answer; drain-s: from the last arrival to the last run's end)\n`,
    );
  } finally {
    clearTimeout(watchdog);
    await Promise.all(sims.map((s) => s.close()));
  }
}
