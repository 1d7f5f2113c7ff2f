import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunClass } from '../../src/events/schemas.js';
import { seededRandom } from '../../src/util/seeded-random.js';
import { ADMIN_KEY, TENANT_A_KEY, TENANT_B_KEY, TENANT_C_KEY, eventually, freePort, http, startSluice, testNamespace, writeTestConfig, type HttpResult, type SluiceProcess } from './harness.js';

const TERMINAL = ['completed', 'failed', 'expired', 'cancelled', 'dead_lettered'];
const WORKFLOW = 'one-call';
const PROCESSORS = 3;
/** The provider's request limit: 2 calls a second, small enough for a short test to be well past it. */
const RPM = 120;
const MAX_TOKENS = 512;
/**
 * Token limits as the pacing bench sets them: enforced by the simulator and known to Sluice, but
 * with room (a call uses about a dozen input tokens and holds its max_tokens while it runs), so
 * the request limit is the one that binds and the figures read against it.
 */
const LIMITS = { requestsPerMinute: RPM, inputTokensPerMinute: RPM * 100, outputTokensPerMinute: RPM * MAX_TOKENS * 2 };
/** Open-loop arrivals at twice the limit, each run one LLM call. */
const ARRIVALS_PER_SEC = (2 * RPM) / 60;
const ARRIVAL_SEC = 15;
const RUNS = ARRIVALS_PER_SEC * ARRIVAL_SEC;
const SEED = 13;
/**
 * Interactive runs alone ask for the whole limit: served first they wait a few seconds at most;
 * first come, first served, the last ones would wait about the arrival window (15 s) and more.
 */
const INTERACTIVE_DEADLINE_MS = 30_000;
const BATCH_DEADLINE_MS = 600_000;
/** The backlog left at the end of the arrivals (half the runs) takes about 15 s at the limit; twice that, and slack for a loaded machine. */
const DRAIN_TIMEOUT_MS = 45_000;
/**
 * 429s allowed. None is expected: pacing books every call at the provider's rate (Redis time), a
 * call reaches the simulator no earlier than its turn, the simulator refills at the same rate on
 * the same machine's clock, and its bucket holds one pacing burst (2 calls) when the load starts.
 * Two leave room for a call at the very edge of both buckets; the pacing bench measured 7 % of
 * calls refused without pacing (the breaker pacing them instead), about 4 of this test's 60.
 */
const MAX_RATE_LIMITED = 2;
const TENANTS = [
  { key: TENANT_A_KEY, tenantId: 'tenant-a' },
  { key: TENANT_B_KEY, tenantId: 'tenant-b' },
  { key: TENANT_C_KEY, tenantId: 'tenant-c' },
];

interface Offered {
  key: string;
  runClass: RunClass;
  runId: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * When each run arrives (ms from the start) and its class: times uniform over the window (a
 * Poisson process with that many arrivals), half of each class in a shuffled order. Strictly
 * periodic arrivals of alternating classes would fall in step with the pacer's turns (two arrivals
 * per turn), so one class would meet free turns and the other booked ones, by phase alone.
 */
function arrivalPlan(random: () => number): { atMs: number; runClass: RunClass }[] {
  const times = Array.from({ length: RUNS }, () => random() * ARRIVAL_SEC * 1_000).sort((a, b) => a - b);
  const classes: RunClass[] = Array.from({ length: RUNS }, (_, i) => (i < RUNS / 2 ? 'interactive' : 'batch'));
  for (let i = classes.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [classes[i], classes[j]] = [classes[j]!, classes[i]!];
  }
  return times.map((atMs, i) => ({ atMs, runClass: classes[i]! }));
}

const median = (xs: readonly number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted.length === 0 ? NaN : sorted[Math.floor((sorted.length - 1) / 2)]!;
};
/** The sum of every series of `metric` whose labels include `label`, in a Prometheus text scrape. */
const seriesSum = (text: string, metric: string, label: string) =>
  text
    .split('\n')
    .filter((l) => l.startsWith(`${metric}{`) && l.includes(label))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);

/**
 * Cluster-wide pacing, end to end: three processor processes share one provider's rate limits
 * through Redis while open-loop load arrives at twice the provider's request limit, and the
 * simulator enforces the limits as a provider would. The calls must stay within the limits (the
 * simulator refuses almost none), interactive runs must be served ahead of the batch backlog, and
 * every run must end.
 */
describe('pacing shared by three processors at twice the provider rate limit', () => {
  const namespace = testNamespace('pacing-cluster');
  let front: SluiceProcess;
  const processors: { process: SluiceProcess; metrics: string }[] = [];
  let api: string;
  let sim: string;

  const admin = (path: string, init: Parameters<typeof http>[1] = {}) => http(`${sim}${path}`, { key: ADMIN_KEY, ...init });
  const runView = async (key: string, runId: string) => (await http(`${api}/v1/runs/${runId}`, { key })).body;
  const simulatorCall = () =>
    fetch(`${sim}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': 'test', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'claude-sonnet-4-6', max_tokens: MAX_TOKENS, messages: [{ role: 'user', content: 'u' }] }),
      signal: AbortSignal.timeout(5_000),
    }).then(async (res) => (await res.arrayBuffer(), res.status));

  /**
   * Empties the simulator's request bucket, which starts with a minute's allowance as a provider's
   * does after idling: the load then starts at the limit, as traffic that has been at it does,
   * instead of spending a minute's burst that would hide any pacing.
   */
  const exhaustRequests = async () => {
    let left = RPM * 2;
    let refused = false;
    const caller = async () => {
      while (!refused && left-- > 0) if ((await simulatorCall()) === 429) refused = true;
    };
    await Promise.all(Array.from({ length: 8 }, caller));
    if (!refused) throw new Error(`the simulator's limit of ${RPM} requests/min was not reached in ${RPM * 2} calls`);
  };

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    const roomy = { admission: { bucket: { capacity: 10_000, refillPerSec: 1_000 } }, reads: { bucket: { capacity: 10_000, refillPerSec: 1_000 } } };
    const configPath = writeTestConfig({
      api: { port: apiPort },
      simulator: { port: simPort, anthropicLatencyMs: 50, anthropicJitterMs: 20 },
      kafka: { sessionTimeoutMs: 6_000, heartbeatIntervalMs: 1_000, partitions: { interactive: PROCESSORS, batch: PROCESSORS, status: PROCESSORS } },
      processor: { shutdownGraceMs: 1_000, pacing: { enabled: true } },
      tenants: Object.fromEntries(TENANTS.map((t) => [t.tenantId, roomy])),
      dependencies: { anthropic: { maxTokens: MAX_TOKENS, rateLimit: { ...LIMITS, burstSeconds: 1 } } },
      workflows: {
        [WORKFLOW]: {
          description: 'one LLM call, so a run is exactly one call when nothing fails',
          maxConcurrency: 1_000,
          steps: [{ id: 'answer', kind: 'llm', system: 'Answer briefly.' }],
          fallback: { text: 'The assistant is unavailable right now.' },
        },
      },
    });
    front = await startSluice({ configPath, roles: 'provider-sim,status-sink,api', namespace });
    api = `http://127.0.0.1:${apiPort}`;
    sim = `http://127.0.0.1:${simPort}`;
    expect((await admin('/admin/faults', { method: 'PUT', json: { target: 'anthropic', rateLimit: LIMITS } })).status).toBe(200);
    for (let i = 0; i < PROCESSORS; i++) {
      const opsPort = await freePort();
      processors.push({ process: await startSluice({ configPath, roles: 'processor', namespace, env: { SLUICE_OPS_PORT: String(opsPort) } }), metrics: `http://127.0.0.1:${opsPort}/metrics` });
    }
    // Every processor must own work partitions before the load, or one of them would see none of it.
    await eventually(
      async () => {
        const latest = processors.map((p) => p.process.logs.findLast((l) => l.msg === 'partitions assigned')?.assignment as Record<string, number[]> | undefined);
        const owned = latest.map((a) => Object.values(a ?? {}).flat().length);
        return owned.every((n) => n > 0) && owned.reduce((s, n) => s + n, 0) === 2 * PROCESSORS ? owned : undefined;
      },
      60_000,
      'every processor to own work partitions, all of them assigned',
      250,
    );
  });

  afterAll(async () => {
    await admin('/admin/faults', { method: 'DELETE' }).catch(() => undefined);
    for (const p of processors) await p.process.stop();
    await front?.stop();
  });

  it('keeps 429s to a handful, serves interactive runs before batch, ends every run, with every processor calling', async () => {
    await exhaustRequests();
    // One burst of pacing's back in the simulator's bucket, as after a short lull.
    await sleep(1_000);
    await admin('/admin/stats/reset', { method: 'POST' });

    // Open loop: runs arrive on schedule whatever happened to earlier ones; tenants rotate, so
    // every tenant sends both classes and every partition gets work.
    const plan = arrivalPlan(seededRandom(SEED)).map((a, i) => ({ ...a, key: TENANTS[i % TENANTS.length]!.key }));
    const started = Date.now();
    const submitted: Promise<HttpResult>[] = [];
    for (const [i, { atMs, runClass, key }] of plan.entries()) {
      await sleep(Math.max(0, started + atMs - Date.now()));
      const deadlineMs = runClass === 'interactive' ? INTERACTIVE_DEADLINE_MS : BATCH_DEADLINE_MS;
      submitted.push(http(`${api}/v1/runs`, { method: 'POST', key, json: { workflow: WORKFLOW, class: runClass, input: { n: i }, deadlineMs } }));
    }
    const arrivalsEnd = Date.now();
    const answers = await Promise.all(submitted);
    // Admission reserves each run's turn: every batch run is admitted (its deadline leaves room),
    // and an interactive run is refused at the door, with a Retry-After, only when its tenant's
    // share cannot give it a turn within half its deadline; the rest all complete.
    const refused = answers.filter((a) => a.status !== 202);
    expect(refused.every((a) => [429, 503].includes(a.status) && Number(a.headers.get('retry-after')) >= 1 && plan[answers.indexOf(a)]!.runClass === 'interactive'), JSON.stringify(refused.map((a, i) => [a.status, a.body?.code, i]))).toBe(true);
    expect(refused.length).toBeLessThanOrEqual(RUNS / 10);
    const offered: Offered[] = answers.flatMap((a, i) => (a.status === 202 ? [{ key: plan[i]!.key, runClass: plan[i]!.runClass, runId: a.body.runId as string }] : []));

    const views = new Map<string, any>();
    await eventually(
      async () => {
        const open = offered.filter((r) => !views.has(r.runId));
        const seen = await Promise.all(open.map((r) => runView(r.key, r.runId)));
        open.forEach((r, i) => TERMINAL.includes(seen[i]?.status) && views.set(r.runId, seen[i]));
        return views.size === offered.length ? true : undefined;
      },
      DRAIN_TIMEOUT_MS,
      'every run to reach a terminal status',
      500,
    );
    const drainSec = (Date.now() - arrivalsEnd) / 1_000;

    const stats = (await admin('/admin/stats')).body;
    const calls = stats.calls.anthropic ?? 0;
    const rateLimited = stats.rateLimited.anthropic ?? 0;
    const scrapes = await Promise.all(processors.map(async (p) => (await fetch(p.metrics, { signal: AbortSignal.timeout(5_000) })).text()));
    const callsByProcessor = scrapes.map((s) => seriesSum(s, 'sluice_step_calls_total', 'dependency="anthropic"'));
    const deferred = scrapes.reduce((sum, s) => sum + seriesSum(s, 'sluice_pacing_deferred_total', 'dependency="anthropic"'), 0);

    // Per class: how runs ended, and for those the provider answered, admission to the answer.
    const figures = (runClass: RunClass) => {
      const ofClass = offered.filter((r) => r.runClass === runClass).map((r) => views.get(r.runId));
      const answered = ofClass.filter((v) => v.status === 'completed' && v.result?.degraded === false);
      const latencies = answered.map((v) => Date.parse(v.finishedAt) - Date.parse(v.admittedAt));
      const outcomes: Record<string, number> = {};
      for (const v of ofClass) {
        const label = v.status === 'completed' && v.result?.degraded ? 'degraded' : (v.status as string);
        outcomes[label] = (outcomes[label] ?? 0) + 1;
      }
      return {
        offered: ofClass.length,
        answered: answered.length,
        answeredByArrivalsEnd: answered.filter((v) => Date.parse(v.finishedAt) <= arrivalsEnd).length,
        p50Ms: median(latencies),
        maxMs: Math.max(...latencies),
        outcomes,
      };
    };
    const interactive = figures('interactive');
    const batch = figures('batch');
    console.log(
      `pacing-cluster: ${RUNS} runs over ${ARRIVAL_SEC} s at ${ARRIVALS_PER_SEC}/s (limit ${RPM}/min); simulator calls ${calls}, 429s ${rateLimited}; ` +
        `calls by processor ${callsByProcessor.join('/')}; deferred turns ${deferred}; drain ${drainSec.toFixed(1)} s after the last arrival\n` +
        `  interactive: ${JSON.stringify(interactive)}\n  batch: ${JSON.stringify(batch)}`,
    );

    // The limits held across the three processes: the simulator refused at most a handful.
    expect(rateLimited).toBeLessThanOrEqual(MAX_RATE_LIMITED);
    // The load was past the limit (turns were deferred), so the pacing was exercised, not idle.
    expect(deferred).toBeGreaterThan(0);
    // The pacing is shared, not one process doing the calls: every processor called the provider
    // (their calls are the simulator's calls), so the limit held only because they paced together;
    // each pacing on its own would have sent up to three times the limit.
    expect(callsByProcessor.every((n) => n > 0)).toBe(true);
    expect(callsByProcessor.reduce((s, n) => s + n, 0)).toBe(calls);

    // Interactive before batch. Interactive runs alone ask for exactly the limit, so with them
    // served first every one is answered within its deadline and most during the arrivals, while
    // the batch backlog waits for what is left, mostly the drain after them (booked behind the
    // interactive turns reserved at the door, once its tenant asks for no more): the interactive
    // median is below the batch one, and at least twice as many interactive runs as batch ones
    // were answered by the last arrival. First come, first served, the two classes come out alike
    // on both counts.
    expect(interactive.outcomes).toEqual({ completed: interactive.offered });
    expect(interactive.p50Ms).toBeLessThan(batch.p50Ms);
    expect(interactive.answeredByArrivalsEnd).toBeGreaterThanOrEqual(2 * batch.answeredByArrivalsEnd);
  }, 150_000);
});
