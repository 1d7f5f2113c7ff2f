import { Redis } from 'ioredis';
import { AdmissionController } from '../../admission/admission-controller.js';
import type { AdmissionDecision } from '../../admission/admission-policy.js';
import { AdmissionStore } from '../../admission/admission-store.js';
import { RedisOutageFallback } from '../../admission/redis-outage.js';
import { ServiceState } from '../../admission/service-state.js';
import { budgetRefillPerSec } from '../../admission/token-budget.js';
import { TokenBudgetStore } from '../../admission/token-budget-store.js';
import { BreakerBoard } from '../../breakers/breaker-board.js';
import type { SluiceConfig } from '../../config/schema.js';
import type { RunRequested } from '../../events/schemas.js';
import { createLogger } from '../../obs/logger.js';
import { createMetrics } from '../../obs/metrics.js';
import { redisKeys } from '../../redis/keys.js';
import { LuaScripts } from '../../redis/scripts.js';
import { newRunId } from '../../runs/run-id.js';
import { seededRandom } from '../../util/seeded-random.js';
import { DEP, bump, oneCallConfig, oneCallRun, runInProcess, sleep, startSim, type InProcessResult, type Sim } from './in-process-sluice.js';
import { budgetArrivals, budgetFigures, type BudgetArrival, type BudgetFigures, type BudgetTenant } from './token-budget-figures.js';

export interface TokenBudgetBenchOptions {
  /** Seconds of arrivals: the measured window. */
  seconds: number;
  /** Tokens offered per minute by each tenant, as a multiple of its budget. */
  load: number;
  /** Seed of the arrivals' offsets and run sizes. */
  seed: number;
  /** Upper bound on one phase: arrivals, then the drain of what is left. */
  phaseTimeoutSec: number;
}

const WORKFLOW = 'one-call';
/**
 * What admission reserves per run until five runs were measured: well above what any tenant's
 * runs use, and the workflow's measured figure is then one average over all tenants, too low for
 * tenant-a's runs and too high for tenant-b's. Settlement with the tokens used corrects both.
 */
const TOKEN_PRIOR = 1_500;
/** Each budget holds this many seconds of its refill: the burst a tenant may spend at once. */
const BURST_SECONDS = 10;
const TENANTS: readonly BudgetTenant[] = [
  { tenantId: 'tenant-a', tokensPerMinute: 24_000, tokensPerRun: 800 },
  { tenantId: 'tenant-b', tokensPerMinute: 12_000, tokensPerRun: 200 },
  { tenantId: 'tenant-c', tokensPerMinute: 6_000, tokensPerRun: 400 },
];
const SIM_LATENCY = { latencyMs: 50, jitterMs: 20 };
/**
 * The simulator counts about four characters a token, of the prompt and of its reply, which
 * echoes the prompt's first 200 characters (about 55 tokens). A run's input of this many
 * characters per token beyond the reply's comes close to the tokens it is meant to use; the
 * figures use what the answers report, not this.
 */
const CHARS_PER_TOKEN = 4;
const REPLY_TOKENS = 55;

/** How long the figures wait for the runs in flight at the last arrival to end. */
const SETTLE_WAIT_MS = 30_000;

const burstOf = (t: BudgetTenant) => (t.tokensPerMinute * BURST_SECONDS) / 60;

function benchConfig(namespace: string, budgets: boolean): SluiceConfig {
  const config = oneCallConfig(namespace);
  config.workflows[WORKFLOW]!.tokenPrior = TOKEN_PRIOR;
  for (const t of TENANTS) {
    const tenant = config.tenants[t.tenantId];
    if (!tenant) throw new Error(`the default configuration has no tenant ${t.tenantId}`);
    if (budgets) tenant.admission.tokenBudget = { tokensPerMinute: t.tokensPerMinute, burstTokens: burstOf(t) };
    else delete tenant.admission.tokenBudget;
  }
  return config;
}

/** A run input whose call uses about `tokens` input+output tokens at the simulator. */
const runInput = (tokens: number) => JSON.stringify('x'.repeat(Math.max(0, (tokens - REPLY_TOKENS) * CHARS_PER_TOKEN)));

/** Admission's answers for one tenant: accepted (admitted or queued), and refusals by reason. */
interface TenantDecisions {
  accepted: number;
  refused: Map<string, number>;
  /** When its first and last arrival were decided: its budget refills from the first (it is created full then). */
  first: number;
  last: number;
}

interface ModeResult {
  run: InProcessResult;
  decisions: Map<string, TenantDecisions>;
  /** The workflow's measured tokens per run admission used at the last arrival (undefined: the prior). */
  estimate: number | undefined;
  /** Tokens left in each tenant's budget at its last arrival once every run settled (none without budgets). */
  left: Map<string, number>;
}

/**
 * Runs as they arrive, each decided by a real AdmissionController (its request bucket, token
 * budget and backlog in Redis) without waiting for earlier decisions; the admitted ones are handed
 * on in the order they were admitted, until every arrival is decided.
 */
function admittedRuns(plan: readonly BudgetArrival[], started: number, admit: (a: BudgetArrival) => Promise<RunRequested | undefined>, afterLastArrival: () => Promise<void>): () => AsyncGenerator<RunRequested> {
  return async function* () {
    const ready: RunRequested[] = [];
    let deciding = 0;
    let arrived = false;
    let failure: unknown;
    let wake: (() => void) | undefined;
    const notify = () => {
      wake?.();
      wake = undefined;
    };
    void (async () => {
      for (const a of plan) {
        await sleep(Math.max(0, started + a.atMs - Date.now()));
        deciding++;
        admit(a).then(
          (run) => {
            if (run) ready.push(run);
          },
          (err: unknown) => {
            failure ??= err;
          },
        ).finally(() => {
          deciding--;
          notify();
        });
      }
      arrived = true;
      notify();
    })();
    for (;;) {
      while (ready.length > 0) yield ready.shift()!;
      if (failure !== undefined) throw failure;
      if (arrived && deciding === 0) {
        await afterLastArrival();
        return;
      }
      await new Promise<void>((resolve) => (wake = resolve));
    }
  };
}

const isRefusal = (d: AdmissionDecision) => d.outcome === 'deferred' || d.outcome === 'rejected';

/** One mode: admission as the API runs it, then Sluice's processor in this process, against its own simulator. */
async function runMode(config: SluiceConfig, sim: Sim, redisUrl: string, plan: readonly BudgetArrival[], started: number, drainTimeoutMs: number): Promise<ModeResult> {
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1, commandTimeout: 5_000 });
  const keys = redisKeys(config.namespace);
  const logger = createLogger('silent');
  const scripts = new LuaScripts(redis);
  const board = new BreakerBoard(redis, keys, { dependencies: [DEP], pollMs: 500, logger });
  const state = new ServiceState(redis, keys, { refreshMs: config.admission.stateRefreshMs, rateWindowSec: config.admission.rateWindowSec, logger, workflows: Object.keys(config.workflows) });
  const backlog = new AdmissionStore(scripts, keys);
  const budgets = new TokenBudgetStore(scripts, keys);
  const admission = new AdmissionController(config, backlog, state, board, createMetrics(), new RedisOutageFallback(config.admission.redisOutage), logger, budgets);
  const workflow = config.workflows[WORKFLOW]!;
  const decisions = new Map(TENANTS.map((t) => [t.tenantId, { accepted: 0, refused: new Map<string, number>(), first: NaN, last: NaN } satisfies TenantDecisions]));
  let estimate: number | undefined;
  const left = new Map<string, number>();
  const admit = async (a: BudgetArrival): Promise<RunRequested | undefined> => {
    const template = oneCallRun(a.tenantId, workflow.defaultClass, config.api.deadlineMs.defaultInteractive);
    const run: RunRequested = { ...template, runId: newRunId(), input: runInput(a.tokens) };
    const decision = await admission.decide({
      runId: run.runId,
      tenantId: run.tenantId,
      tenant: config.tenants[run.tenantId]!,
      workflowName: WORKFLOW,
      workflow,
      runClass: run.class,
      deadline: run.deadline,
      now: run.admittedAt,
      idempotencyKey: false,
    });
    const tally = decisions.get(run.tenantId)!;
    if (Number.isNaN(tally.first)) tally.first = run.admittedAt;
    tally.last = Math.max(run.admittedAt, Number.isNaN(tally.last) ? run.admittedAt : tally.last);
    if (isRefusal(decision)) {
      bump(tally.refused, decision.reason);
      return undefined;
    }
    tally.accepted++;
    return { ...run, tokenReservation: decision.tokenReservation ?? null };
  };
  // The status sink frees a finished run's backlog place in production; here the processor's end does.
  let ended = 0;
  const release = async (run: RunRequested) => {
    ended++;
    await backlog.release({ runId: run.runId, tenantId: run.tenantId, runClass: run.class }, undefined).catch(() => undefined);
  };
  try {
    await board.start();
    await state.start();
    const afterLastArrival = async () => {
      estimate = state.tokensPerRun(WORKFLOW)?.perRun;
      // Runs still in flight settle their reservations against what they use: wait for them.
      const accepted = [...decisions.values()].reduce((sum, d) => sum + d.accepted, 0);
      const until = Date.now() + SETTLE_WAIT_MS;
      while (ended < accepted && Date.now() < until) await sleep(50);
      // A take of nothing refills the bucket to now and answers its level, changing nothing else;
      // the refill since the tenant's last arrival, which it had no run to spend on, is taken off.
      for (const t of TENANTS) {
        const budget = config.tenants[t.tenantId]!.admission.tokenBudget;
        if (!budget) continue;
        const level = (await budgets.take(t.tenantId, budget, 0)).tokensLeft;
        left.set(t.tenantId, level - (budgetRefillPerSec(budget) * (Date.now() - decisions.get(t.tenantId)!.last)) / 1_000);
      }
    };
    const run = await runInProcess({ config, cap: 'none', redisUrl, simUrl: sim.url, runs: admittedRuns(plan, started, admit, afterLastArrival), drainTimeoutMs, onEnded: release });
    return { run, decisions, estimate, left };
  } finally {
    state.stop();
    await board.close();
    await redis.quit();
  }
}

interface TenantRow extends BudgetFigures {
  tenant: BudgetTenant;
  offered: number;
  accepted: number;
  deferredForBudget: number;
  otherRefusals: number;
  answered: number;
  left: number | undefined;
  /** From the tenant's first arrival to its last: the window its budget refilled over. */
  spanMs: number;
}

function tenantRows(mode: ModeResult, plan: readonly BudgetArrival[]): TenantRow[] {
  return TENANTS.map((tenant) => {
    const usage = mode.run.usage.filter((u) => u.tenantId === tenant.tenantId);
    const d = mode.decisions.get(tenant.tenantId)!;
    const deferredForBudget = d.refused.get('token_budget_exhausted') ?? 0;
    const used = usage.reduce((sum, u) => sum + u.tokens, 0);
    return {
      tenant,
      offered: plan.filter((a) => a.tenantId === tenant.tenantId).length,
      accepted: d.accepted,
      deferredForBudget,
      otherRefusals: [...d.refused.values()].reduce((a, b) => a + b, 0) - deferredForBudget,
      answered: usage.length,
      left: mode.left.get(tenant.tenantId),
      spanMs: d.last - d.first,
      ...budgetFigures({ used, windowMs: d.last - d.first, tokensPerMinute: tenant.tokensPerMinute, burstTokens: burstOf(tenant) }),
    };
  });
}

const figure = (x: number) => (Number.isFinite(x) ? x.toFixed(3) : '-');

function table(modes: readonly { label: string; rows: TenantRow[] }[]): string {
  const cols: [string, number][] = [['mode', 10], ['tenant', 9], ['budget/min', 10], ['burst', 6], ['offered', 7], ['accepted', 8], ['deferred', 8], ['other', 5], ['tok/run', 7], ['span-s', 6], ['used', 8], ['left', 6], ['allowance', 9], ['used/allow', 10], ['rate/budget', 11]];
  const line = (cells: string[]) => `  ${cells.map((c, i) => (i < 2 ? c.padEnd(cols[i]![1]) : c.padStart(cols[i]![1]))).join(' ')}`;
  const rows = modes.flatMap(({ label, rows }) =>
    rows.map((r) =>
      line([
        label,
        r.tenant.tenantId,
        String(r.tenant.tokensPerMinute),
        String(burstOf(r.tenant)),
        String(r.offered),
        String(r.accepted),
        String(r.deferredForBudget),
        String(r.otherRefusals),
        r.answered === 0 ? '-' : String(Math.round(r.used / r.answered)),
        (r.spanMs / 1_000).toFixed(1),
        String(r.used),
        r.left === undefined ? '-' : String(Math.round(r.left)),
        String(Math.round(r.allowance)),
        figure(r.usedOfAllowance),
        figure(r.rateOfBudget),
      ]),
    ),
  );
  return `${line(cols.map(([c]) => c))}\n${rows.join('\n')}\n`;
}

/**
 * Tokens used per tenant against its token budget at admission: the same seeded open-loop
 * arrivals, each tenant offering `load` times its budget in runs whose real size differs from the
 * workflow's prior and from tenant to tenant, go side by side to two Sluices in this process
 * (admission as the API runs it; the real dispatcher and executor, settling every run's tokens),
 * one with the tenants' budgets, one without. Used tokens are what the simulator's answers report.
 */
export async function benchTokenBudget(opts: TokenBudgetBenchOptions): Promise<void> {
  const namespace = `bench-token-budget-${Date.now()}-`;
  const modes = [
    { label: 'no budget', config: benchConfig(`${namespace}none-`, false) },
    { label: 'budget', config: benchConfig(`${namespace}budget-`, true) },
  ];
  // Only Redis is needed: no Kafka, no Postgres.
  const redisUrl = process.env.REDIS_URL || modes[0]!.config.redis.url;
  const plan = budgetArrivals(TENANTS, opts.load, opts.seconds, seededRandom(opts.seed));
  const phaseMs = opts.phaseTimeoutSec * 1_000;
  const watchdog = setTimeout(() => {
    process.stderr.write(`sluice-bench token-budget: no result within ${opts.phaseTimeoutSec + 60} s; keys under ${namespace} may be left in Redis\n`);
    process.exit(1);
  }, phaseMs + 60_000);
  watchdog.unref();

  const sims = await Promise.all(modes.map(() => startSim(SIM_LATENCY)));
  try {
    const started = Date.now();
    const drainTimeoutMs = Math.max(10_000, phaseMs - opts.seconds * 1_000);
    const results = await Promise.all(modes.map((m, i) => runMode(m.config, sims[i]!, redisUrl, plan, started, drainTimeoutMs)));
    const budgeted = results[1]!;
    const unfinished = results.map((r, i) => (r.run.unfinished > 0 ? ` ${modes[i]!.label}: ${r.run.unfinished} runs unfinished at the timeout;` : '')).join('');
    process.stdout.write(
      `\n$ sluice-bench token-budget --seconds ${opts.seconds} --load ${opts.load} --seed ${opts.seed} --phase-timeout ${opts.phaseTimeoutSec}\n` +
        `token-budget: ${plan.length} one-call runs offered open-loop over ${opts.seconds} s, each tenant at ${opts.load}x its budget in runs of half to 1.5x its mean size; seed ${opts.seed}\n` +
        `workflow tokenPrior ${TOKEN_PRIOR}; its measured tokens per run at the last arrival (budget mode): ${budgeted.estimate === undefined ? 'none yet' : Math.round(budgeted.estimate)}; burst ${BURST_SECONDS} s of each budget; simulator latency ${SIM_LATENCY.latencyMs}+0..${SIM_LATENCY.jitterMs} ms${unfinished}\n` +
        table(modes.map((m, i) => ({ label: m.label, rows: tenantRows(results[i]!, plan) }))) +
        `  (offered/accepted: runs; deferred: 429 token_budget_exhausted; other: other refusals; span-s: from the tenant's first arrival (its budget is created full) to its last;\n` +
        `   tok/run, used: input+output tokens the simulator's answers reported for the tenant's runs, all admitted within the span; left: tokens in the budget at the last arrival, once every run settled;\n` +
        `   allowance: burst + budget/min x span, the most a full budget hands out over it; used/allow: used / allowance; rate/budget: (used - burst) per minute of the span / budget per minute,\n` +
        `   1 = exactly the budget; the same formulas for the mode without a budget)\n`,
    );
  } finally {
    clearTimeout(watchdog);
    await Promise.all(sims.map((s) => s.close()));
  }
}
