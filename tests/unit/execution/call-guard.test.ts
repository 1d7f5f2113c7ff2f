import type { PaceTurn } from '../../../src/pacing/dependency-pacer.js';
import { describe, expect, it } from 'vitest';
import type { BreakerView } from '../../../src/breakers/breaker-gate.js';
import type { BreakerAdmission } from '../../../src/breakers/breaker-store.js';
import { loadConfig } from '../../../src/config/load.js';
import type { RunRequested } from '../../../src/events/schemas.js';
import { CallGuard, DependencyUnavailable, type CallPacer } from '../../../src/execution/call-guard.js';
import { InfrastructureError } from '../../../src/execution/run-faults.js';
import { createLogger } from '../../../src/obs/logger.js';
import type { SluiceConfig } from '../../../src/config/schema.js';
import type { AdaptiveLimitStore } from '../../../src/permits/adaptive-limit-store.js';
import { StepError } from '../../../src/steps/step-error.js';

const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);
const config = loadConfig({ env: {} });
const openMs = config.dependencies.anthropic!.breaker.openMs;
const run = { runId: 'r1', class: 'interactive', deadline: NOW + 30_000 } as RunRequested;

function guard(
  opts: {
    view?: BreakerView;
    live?: boolean;
    now?: () => number;
    admit?: () => Promise<BreakerAdmission>;
    release?: () => Promise<void>;
    record?: () => Promise<{ state: 'closed'; changed: boolean }>;
    pacer?: CallPacer;
    config?: SluiceConfig;
    adaptiveLimits?: Pick<AdaptiveLimitStore, 'apply'>;
  } = {},
) {
  const asked: string[] = [];
  const told: string[] = [];
  const warnings: string[] = [];
  const infos: string[] = [];
  const logger = createLogger('silent');
  logger.warn = ((_: unknown, msg: string) => void warnings.push(msg)) as typeof logger.warn;
  logger.info = ((_: unknown, msg: string) => void infos.push(msg)) as typeof logger.info;
  const g = new CallGuard({
    config: opts.config ?? config,
    board: { view: (d) => opts.view ?? { name: d, state: 'closed' }, live: () => opts.live ?? false },
    breakers: {
      admit: async (d, token) => {
        asked.push(`${d} ${token}`);
        return opts.admit ? opts.admit() : { allowed: true, probe: false };
      },
      record: async (d, token, outcome, ms) => {
        told.push(`record ${d} ${token ?? '-'} ${outcome} ${ms}`);
        return opts.record ? opts.record() : { state: 'closed', changed: false };
      },
      tally: async (d, calls) => (told.push(`tally ${d} ${calls}`), true),
    },
    dependencyPermits: { acquire: async () => opts.release ?? (async () => undefined) },
    pacer: opts.pacer,
    adaptiveLimits: opts.adaptiveLimits,
    logger,
    now: opts.now ?? (() => NOW),
  });
  return { g, asked, told, warnings, infos };
}

async function refusal(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => undefined,
    (err: unknown) => err,
  );
}

describe('CallGuard.admit', () => {
  it('lets a call out through a closed breaker, and names its token only when the call is a probe', async () => {
    expect(await guard().g.admit(run, 'anthropic', 't1')).toBeUndefined();
    expect(await guard({ admit: async () => ({ allowed: true, probe: true }) }).g.admit(run, 'anthropic', 't2')).toBe('t2');
  });

  it('does not ask the shared breaker about one this instance already sees open', async () => {
    const { g, asked } = guard({ view: { name: 'anthropic', state: 'open', retryAt: NOW + 5_000 } });
    expect(await refusal(g.admit(run, 'anthropic', 't'))).toMatchObject({ dependency: 'anthropic', until: NOW + 5_000, canWait: true });
    expect(await refusal(g.admit({ ...run, deadline: NOW + 5_050 }, 'anthropic', 't'))).toMatchObject({ canWait: false });
    expect(asked).toEqual([]);
  });

  it("refused half-open, looks again within openMs; refused open, at the breaker's retryAt", async () => {
    const late = NOW + openMs + 60_000;
    const halfOpen = guard({ admit: async () => ({ allowed: false, state: 'half_open', retryAt: late }) });
    const err = await refusal(halfOpen.g.admit({ ...run, class: 'batch' }, 'anthropic', 't'));
    expect(err).toBeInstanceOf(DependencyUnavailable);
    expect(err).toMatchObject({ until: NOW + openMs, canWait: true });
    const open = guard({ admit: async () => ({ allowed: false, state: 'open', retryAt: NOW + 1_000 }) });
    expect(await refusal(open.g.admit(run, 'anthropic', 't'))).toMatchObject({ until: NOW + 1_000, canWait: true });
  });

  it('names the breaker admission when the shared breaker cannot be asked', async () => {
    const { g } = guard({ admit: () => Promise.reject(new Error('Command timed out')) });
    const err = await refusal(g.admit(run, 'anthropic', 't'));
    expect(err).toBeInstanceOf(InfrastructureError);
    expect(err).toMatchObject({ operation: 'breaker_admission' });
  });
});

describe('CallGuard and a board that follows the breakers live', () => {
  it('does not ask Redis to admit a call while the live board sees the breaker closed', async () => {
    const live = guard({ live: true });
    expect(await live.g.admit(run, 'anthropic', 't1')).toBeUndefined();
    expect(live.asked).toEqual([]);
    // A board that lags (reconnecting) cannot vouch for a closed breaker: Redis is asked.
    const lagging = guard({ live: false });
    await lagging.g.admit(run, 'anthropic', 't2');
    expect(lagging.asked).toEqual(['anthropic t2']);
  });

  it('still asks Redis for a breaker due for probing: a probe always goes through Redis', async () => {
    const { g, asked } = guard({ live: true, view: { name: 'anthropic', state: 'open', retryAt: NOW - 1 }, admit: async () => ({ allowed: true, probe: true }) });
    expect(await g.admit(run, 'anthropic', 't3')).toBe('t3');
    expect(asked).toEqual(['anthropic t3']);
  });
});

describe('CallGuard.record', () => {
  const slowCallMs = config.dependencies.anthropic!.breaker.slowCallMs;

  it('counts prompt successes while closed and sends them in bulk once the oldest waited a second', async () => {
    let now = NOW;
    const { g, told } = guard({ now: () => now });
    await g.record('anthropic', undefined, 'success', 10);
    now += 500;
    await g.record('anthropic', undefined, 'success', 10);
    expect(told).toEqual([]);
    now += 500;
    await g.record('anthropic', undefined, 'success', 10);
    expect(told).toEqual(['tally anthropic 3']);
  });

  it('sends a failure at once, after the successes counted before it', async () => {
    const { g, told } = guard();
    await g.record('anthropic', undefined, 'success', 10);
    await g.record('anthropic', undefined, 'success', 10);
    await g.record('anthropic', undefined, 'failure', 10);
    await g.record('anthropic', undefined, 'failure', 10);
    expect(told).toEqual(['tally anthropic 2', 'record anthropic - failure 10', 'record anthropic - failure 10']);
  });

  it('sends at once a slow success, a probe\'s outcome, a released call, and any success while the board sees the breaker not closed', async () => {
    const closed = guard();
    await closed.g.record('anthropic', undefined, 'success', slowCallMs);
    await closed.g.record('anthropic', 'probe-1', 'success', 10);
    await closed.g.record('anthropic', undefined, 'released', 10);
    expect(closed.told).toEqual([`record anthropic - success ${slowCallMs}`, 'record anthropic probe-1 success 10', 'record anthropic - released 10']);
    const halfOpen = guard({ view: { name: 'anthropic', state: 'half_open' } });
    await halfOpen.g.record('anthropic', undefined, 'success', 10);
    expect(halfOpen.told).toEqual(['record anthropic - success 10']);
  });
});

describe('CallGuard permits and outcomes', () => {
  it('logs a permit it could not give back instead of failing the call', async () => {
    const { g, warnings } = guard({ release: () => Promise.reject(new Error('Command timed out')) });
    const release = await g.takePermit(run, 'anthropic');
    await expect(release()).resolves.toBeUndefined();
    expect(warnings).toEqual(['could not release a dependency permit; its lease will expire']);
  });

  it('logs an outcome the breaker could not be told, and a call that moved the breaker', async () => {
    const failing = guard({ record: () => Promise.reject(new Error('Command timed out')) });
    await expect(failing.g.record('anthropic', undefined, 'failure', 10)).resolves.toBeUndefined();
    expect(failing.warnings).toEqual(['could not record a call outcome with the breaker']);
    const moving = guard({ record: async () => ({ state: 'closed', changed: true }) });
    await moving.g.record('anthropic', 'probe', 'success', 10);
    expect(moving.warnings).toEqual(['this call moved the breaker']);
  });
});

describe('CallGuard.pace and afterCall', () => {
  const tokens = { inputTokens: 10, outputTokens: 512 };
  const pacerOf = (book: CallPacer['book'], after: Partial<CallPacer> = {}): CallPacer => ({ book, settle: async () => undefined, learn: async () => undefined, giveBack: async () => undefined, ...after });

  it('does nothing without a pacer (pacing disabled)', async () => {
    const { g } = guard();
    await expect(g.pace(run, 'anthropic', tokens)).resolves.toBeUndefined();
    await expect(g.afterCall('anthropic', tokens, tokens, { status: 200 })).resolves.toBeUndefined();
  });

  it('books with the run (its class and deadline) and waits out a booked turn once', async () => {
    const asked: unknown[] = [];
    const { g } = guard({ pacer: pacerOf(async (...args) => (asked.push(args), { kind: 'go', waitMs: 30 })) });
    const started = Date.now();
    await g.pace(run, 'anthropic', tokens);
    expect(Date.now() - started).toBeGreaterThanOrEqual(25);
    expect(asked).toEqual([['anthropic', tokens, run, false]]);
  });

  it('refuses a deferred call as rate limited, waitable only if a useful call fits before the deadline (batch always)', async () => {
    const deferTo = (until: number) => guard({ pacer: pacerOf(async () => ({ kind: 'defer', until })) }).g;
    const err = await refusal(deferTo(NOW + 5_000).pace(run, 'anthropic', tokens));
    expect(err).toBeInstanceOf(DependencyUnavailable);
    expect(err).toMatchObject({ dependency: 'anthropic', until: NOW + 5_000, canWait: true, reason: 'rate_limited', message: 'anthropic is rate limited: no turn until 2026-01-01T12:00:05.000Z' });
    expect(await refusal(deferTo(run.deadline).pace(run, 'anthropic', tokens))).toMatchObject({ canWait: false });
    expect(await refusal(deferTo(run.deadline).pace({ ...run, class: 'batch' }, 'anthropic', tokens))).toMatchObject({ canWait: true });
  });

  it('spends the turns reserved at admission on a first attempt, books only tokens for them, and gives back what is left', async () => {
    const booked: boolean[] = [];
    const given: unknown[] = [];
    let answer: PaceTurn = { kind: 'go', waitMs: 0 };
    const { g } = guard({ pacer: pacerOf(async (_d, _t, _r, prepaid) => (booked.push(prepaid ?? false), answer), { giveBack: async (...args) => void given.push(args) }) });
    const reserved = { ...run, tenantId: 'tenant-c', attempt: 1, prepaidTurns: [{ dependency: 'anthropic', calls: 2, notBefore: 0 }] } as RunRequested;
    await g.pace(reserved, 'anthropic', tokens);
    // a call deferred on its tokens puts its turn back
    answer = { kind: 'defer', until: NOW + 5_000 };
    await refusal(g.pace(reserved, 'anthropic', tokens));
    answer = { kind: 'go', waitMs: 0 };
    await g.pace(reserved, 'anthropic', tokens);
    await g.pace(reserved, 'anthropic', tokens);
    expect(booked).toEqual([true, true, true, false]);
    await g.endAttempt(reserved);
    expect(given).toEqual([]);
    const unused = { ...reserved, runId: 'r2' } as RunRequested;
    await g.pace(unused, 'anthropic', tokens);
    await g.endAttempt(unused);
    expect(given).toEqual([['anthropic', 'tenant-c', 1]]);
    // an attempt repeated after it ended books its turns again
    await g.pace(unused, 'anthropic', tokens);
    expect(booked.at(-1)).toBe(false);
  });

  it('waits for reserved turns that are not due yet', async () => {
    const { g } = guard({ pacer: pacerOf(async () => ({ kind: 'go', waitMs: 0 })), now: Date.now });
    const reserved = { ...run, tenantId: 'tenant-c', attempt: 1, prepaidTurns: [{ dependency: 'anthropic', calls: 1, notBefore: Date.now() + 40 }] } as RunRequested;
    const started = Date.now();
    await g.pace(reserved, 'anthropic', tokens);
    expect(Date.now() - started).toBeGreaterThanOrEqual(35);
  });

  it('names the pacing when booking fails', async () => {
    const { g } = guard({ pacer: pacerOf(async () => Promise.reject(new Error('Connection is closed.'))) });
    const err = await refusal(g.pace(run, 'anthropic', tokens));
    expect(err).toBeInstanceOf(InfrastructureError);
    expect(err).toMatchObject({ operation: 'pacing' });
  });

  it('settles only a call whose usage is known, and logs rather than throws when the pacer cannot be told', async () => {
    const settled: unknown[] = [];
    const ok = guard({ pacer: pacerOf(async () => ({ kind: 'go', waitMs: 0 }), { settle: async (...args) => void settled.push(args) }) });
    await ok.g.afterCall('anthropic', tokens, undefined, { status: 429 });
    await ok.g.afterCall('anthropic', tokens, { inputTokens: 8, outputTokens: 20 }, { status: 200 });
    expect(settled).toEqual([['anthropic', tokens, { inputTokens: 8, outputTokens: 20 }]]);
    const failing = guard({ pacer: pacerOf(async () => ({ kind: 'go', waitMs: 0 }), { learn: async () => Promise.reject(new Error('down')) }) });
    await expect(failing.g.afterCall('anthropic', tokens, tokens, { status: 200 })).resolves.toBeUndefined();
    expect(failing.warnings).toEqual(['could not tell the pacer how a call went']);
  });
});

describe('CallGuard.adapt', () => {
  const policy = { min: 2, decreaseFactor: 0.5, latencyTargetMs: 1_000, cooldownMs: 1_000, idleResetMs: 60_000 };
  const adaptive = structuredClone(config);
  adaptive.dependencies.anthropic!.adaptiveConcurrency = policy;
  const tooMany = new StepError('http_status', 'anthropic', '429', true, 429);

  function adapting(apply: AdaptiveLimitStore['apply'] = async () => ({ limit: 1, cut: false })) {
    const applied: unknown[] = [];
    const fixture = guard({ config: adaptive, adaptiveLimits: { apply: async (...args) => (applied.push(args), apply(...args)) } });
    return { ...fixture, applied };
  }

  it('applies each call\'s signal to the dependency\'s figure, with its bounds and policy', async () => {
    const { g, applied } = adapting();
    await g.adapt('anthropic', undefined, 200);
    await g.adapt('anthropic', undefined, 1_500);
    await g.adapt('anthropic', tooMany, 10);
    const bounds = { min: 2, max: config.dependencies.anthropic!.maxConcurrency };
    expect(applied).toEqual([
      ['anthropic', 'success', bounds, policy],
      ['anthropic', 'congestion', bounds, policy],
      ['anthropic', 'congestion', bounds, policy],
    ]);
  });

  it('applies nothing for a call that says nothing of load', async () => {
    const { g, applied } = adapting();
    await g.adapt('anthropic', new StepError('http_status', 'anthropic', '500', true, 500), 10);
    await g.adapt('anthropic', new Error('cancelled'), 10);
    expect(applied).toEqual([]);
  });

  it('applies nothing for a dependency without adaptiveConcurrency, or without a store (caps off)', async () => {
    const { g, applied } = adapting();
    await g.adapt('order-lookup', tooMany, 10);
    await g.adapt('no-such-dependency', tooMany, 10);
    expect(applied).toEqual([]);
    await expect(guard({ config: adaptive }).g.adapt('anthropic', tooMany, 10)).resolves.toBeUndefined();
  });

  it('logs a cut, and logs rather than throws when the figure cannot be moved', async () => {
    const cutting = adapting(async () => ({ limit: 3, cut: true }));
    await cutting.g.adapt('anthropic', tooMany, 10);
    expect(cutting.infos).toEqual(['congestion: lowered the adaptive concurrency limit']);
    const failing = adapting(() => Promise.reject(new Error('Connection is closed.')));
    await expect(failing.g.adapt('anthropic', tooMany, 10)).resolves.toBeUndefined();
    expect(failing.warnings).toEqual(['could not update the adaptive concurrency limit']);
  });
});
