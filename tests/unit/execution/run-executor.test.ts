import Anthropic from '@anthropic-ai/sdk';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import type { RunRequested, RunStatusChanged } from '../../../src/events/schemas.js';
import { heldSequence, slotsPerStep, stepSequence } from '../../../src/runs/status-sequence.js';
import { createLogger } from '../../../src/obs/logger.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { RunExecutor, type RunExecutorDeps } from '../../../src/execution/run-executor.js';
import { MemoryRunCalls } from '../../../src/execution/run-progress.js';
import type { CancelReason } from '../../../src/runs/cancellation.js';
import { InfrastructureError, type RunFailure } from '../../../src/execution/run-faults.js';
import { toStepError } from '../../../src/steps/llm-call.js';
import { StepError } from '../../../src/steps/step-error.js';
import type { BreakerView } from '../../../src/breakers/breaker-gate.js';
import type { BreakerAdmission } from '../../../src/breakers/breaker-store.js';
import type { DeadLetterEnvelope } from '../../../src/events/schemas.js';
import { ATTEMPT } from '../processors/fixtures.js';
import { NOW, RUN } from './fixtures.js';
import { terminalSequence } from '../../../src/runs/status-sequence.js';
import { RETRY_HEADER } from '../../../src/retries/retry-headers.js';
import { RetryBudgets } from '../../../src/retries/retry-budget.js';
import { ToolConnections } from '../../../src/steps/tool-connections.js';
import type { LlmResult } from '../../../src/steps/llm-call.js';
import { histogramValue, metricValue } from '../../support/metric-value.js';
import type { CallPacer } from '../../../src/execution/call-guard.js';
import type { PaceTurn } from '../../../src/pacing/dependency-pacer.js';
import type { CallResponse, CallTokens } from '../../../src/pacing/pacing-policy.js';

const run = RUN;

/** The tool calls' connections: kept alive between tests, closed with the last. */
const toolConnections = new ToolConnections();
afterAll(() => toolConnections.close());

/** An executor whose LLM answers at once (or fails as `llmFailures` says) and whose tools must never be called. */
function executor(cancelAnswers: (CancelReason | undefined)[], journal: Map<string, unknown> = new Map(), llmFailures: Error[] = [], config = loadConfig({ env: {} }), opts: { breaker?: BreakerView; admit?: BreakerAdmission[]; llmText?: string; runCalls?: MemoryRunCalls; deps?: Partial<RunExecutorDeps> } = {}) {
  const published: RunStatusChanged[] = [];
  const retries: { run: RunRequested; headers: Record<string, string> }[] = [];
  const deadLetters: { envelope: DeadLetterEnvelope; headers: Record<string, string> }[] = [];
  const recorded: { dependency: string; token: string | undefined; outcome: string }[] = [];
  let llmCalls = 0;
  let checks = 0;
  const metrics = createMetrics();
  const runCalls = opts.runCalls ?? new MemoryRunCalls();
  const exec = new RunExecutor({
    config,
    llm: async () => {
      llmCalls++;
      const failure = llmFailures.shift();
      if (failure) throw toStepError('anthropic', failure);
      const text = opts.llmText ?? 'ok';
      const answerBytes = Buffer.byteLength(text);
      return { text, content: [{ type: 'text', text }], model: 'sim', stopReason: 'end_turn', answerBytes, usage: { inputTokens: 1, outputTokens: Math.ceil(answerBytes / 4), cacheReadTokens: 0, cacheCreationTokens: 0 } };
    },
    tool: (req) => toolConnections.call(req),
    simulatorUrl: 'http://127.0.0.1:1',
    publishStatus: async (e) => void published.push(e),
    dependencyPermits: { acquire: async () => async () => undefined },
    // Every read of the cancellation takes the next answer: at the start, with each recorded step, or alone.
    progress: {
      open: async () => ({ done: new Map(journal), cancelled: cancelAnswers[checks++] }),
      record: async (_runId: string, stepId: string, output: unknown) => {
        journal.set(stepId, output);
        return cancelAnswers[checks++];
      },
      cancelReason: async () => cancelAnswers[checks++],
      addCalls: (runId, calls) => runCalls.addCalls(runId, calls),
      end: (r, calls) => runCalls.end(r, calls),
    },
    breakers: {
      admit: async () => opts.admit?.shift() ?? { allowed: true, probe: false },
      record: async (dependency, token, outcome) => {
        recorded.push({ dependency, token, outcome });
        return { state: 'closed', changed: false };
      },
      tally: async (dependency, calls) => {
        for (let i = 0; i < calls; i++) recorded.push({ dependency, token: undefined, outcome: 'success' });
        return true;
      },
    },
    // Not live: every call asks the breaker, as the tests of its answers need.
    board: { view: (d) => (opts.breaker?.name === d ? opts.breaker : { name: d, state: 'closed' }), live: () => false },
    enqueueRetry: async (r, headers) => void retries.push({ run: r, headers }),
    deadLetters: { publishDeadLetter: async (envelope, headers) => void deadLetters.push({ envelope, headers }) },
    retryBudgets: new RetryBudgets(() => NOW),
    metrics,
    logger: createLogger('silent'),
    now: () => NOW,
    random: () => 0,
    ...opts.deps,
  });
  return { exec, published, retries, deadLetters, recorded, metrics, llmCalls: () => llmCalls, checks: () => checks };
}

describe('RunExecutor cancellation', () => {
  it('never starts a run cancelled while queued', async () => {
    const { exec, published, llmCalls } = executor(['requested']);
    expect(await exec.execute(run, ATTEMPT)).toBe('cancelled');
    expect(llmCalls()).toBe(0);
    expect(published).toHaveLength(1);
    expect(published[0]).toMatchObject({ status: 'cancelled', sequence: terminalSequence(1), error: null, result: null, step: null });
    expect(published[0]!.message).toBe("cancelled: stopped at the caller's request before it started");
  });

  it('never starts a run whose submission was answered 503, and says so', async () => {
    const { exec, published, llmCalls } = executor(['not_acknowledged']);
    expect(await exec.execute(run, ATTEMPT)).toBe('cancelled');
    expect(llmCalls()).toBe(0);
    expect(published.map((e) => e.status)).toEqual(['cancelled']);
    expect(published[0]!.message).toMatch(/^cancelled: stopped because its submission was answered 503 .* before it started$/);
  });

  it('stops at the next step boundary, before the tool call, as read when the first step was recorded', async () => {
    const { exec, published, llmCalls, checks } = executor([undefined, 'requested']);
    expect(await exec.execute(run, ATTEMPT)).toBe('cancelled');
    expect(llmCalls()).toBe(1);
    expect(checks()).toBe(2);
    expect(published.map((e) => e.status)).toEqual(['running', 'cancelled']);
    expect(published[1]!.message).toContain('at the step boundary before step 2/3 (lookup-order)');
    expect(published[1]!.error).toBeNull();
  });
});

describe('RunExecutor step boundaries', () => {
  const reading = (journal: Map<string, unknown>, reads: string[]) =>
    executor([], journal, [], loadConfig({ env: {} }), {
      deps: {
        progress: {
          open: async () => (reads.push('open'), { done: new Map(journal), cancelled: undefined }),
          record: async (_runId, stepId) => (reads.push(`record ${stepId}`), undefined),
          cancelReason: async () => (reads.push('check'), undefined),
          addCalls: async () => undefined,
          end: async (_run, calls) => calls,
        },
      },
    });

  it('reads the cancellation once per boundary: with the step just recorded, or alone after a step already done', async () => {
    const reads: string[] = [];
    const { exec } = reading(new Map([['lookup-order', { orderId: '42' }]]), reads);
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(reads).toEqual(['open', 'record understand', 'check', 'record reply']);
  });

  it('records nothing for steps already done', async () => {
    const reads: string[] = [];
    const { exec } = reading(new Map<string, unknown>([['understand', { text: 'order 42' }], ['lookup-order', { orderId: '42' }]]), reads);
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(reads).toEqual(['open', 'check', 'check', 'record reply']);
  });
});

describe('RunExecutor on redelivery', () => {
  it('does not repeat a step the journal says completed: a killed run resumes after its finished steps', async () => {
    // The first delivery finished both LLM steps and the tool before dying; nothing is called again.
    const journal = new Map<string, unknown>([
      ['understand', { text: 'order 42' }],
      ['lookup-order', { orderId: '42', status: 'shipped' }],
      ['reply', { text: 'It shipped.' }],
    ]);
    const { exec, published, llmCalls } = executor([], journal);
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(llmCalls()).toBe(0);
    expect(JSON.parse(published.at(-1)!.result!)).toMatchObject({ text: 'It shipped.' });
  });

  it('records each completed step, so the next delivery can skip it', async () => {
    const journal = new Map<string, unknown>([['lookup-order', { orderId: '42' }]]);
    const { exec, llmCalls } = executor([], journal);
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(llmCalls()).toBe(2);
    expect([...journal.keys()].sort()).toEqual(['lookup-order', 'reply', 'understand']);
  });
});

describe('RunExecutor retries (the one retry layer)', () => {
  const overloaded = () => Anthropic.APIError.generate(529, { type: 'error', error: { type: 'overloaded_error', message: 'busy' } }, 'overloaded', new Headers());
  const badRequest = () => Anthropic.APIError.generate(400, { type: 'error', error: { type: 'invalid_request_error', message: 'no' } }, 'bad', new Headers());
  // Only the first step is an LLM call that fails here; the journal answers the other two steps.
  const laterSteps = () => new Map<string, unknown>([['lookup-order', { orderId: '42' }], ['reply', { text: 'done' }]]);

  it('retries a 529 once (anthropic allows 2 attempts) and completes', async () => {
    const { exec, llmCalls } = executor([], laterSteps(), [overloaded()]);
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(llmCalls()).toBe(2);
  });

  it('after the step\'s attempts, re-enqueues the run on the retry topic (attempt 2) instead of failing it', async () => {
    const { exec, llmCalls, published, retries, deadLetters } = executor([], laterSteps(), [overloaded(), overloaded(), overloaded()]);
    expect(await exec.execute(run, ATTEMPT)).toBe('retried');
    expect(llmCalls()).toBe(2);
    expect(retries).toHaveLength(1);
    expect(retries[0]!.run).toMatchObject({ runId: run.runId, attempt: 2 });
    expect(retries[0]!.run.dueAt).toBeGreaterThan(NOW);
    expect(retries[0]!.headers).toMatchObject({ 'sluice-retry-failures': '1', 'sluice-retry-class': 'interactive' });
    expect(published.at(-1)).toMatchObject({ status: 'waiting_dependency', sequence: terminalSequence(1), error: null });
    expect(published.at(-1)!.message).toMatch(/^anthropic failed .*; attempt 2 at /);
    expect(deadLetters).toHaveLength(0);
  });

  it('does not re-enqueue when the backoff would end after the deadline', async () => {
    const { exec, retries, published } = executor([], laterSteps(), [overloaded(), overloaded()]);
    const tight = { ...run, deadline: NOW + 50 };
    expect(await exec.execute(tight, ATTEMPT)).toBe('completed');
    expect(retries).toHaveLength(0);
    expect(JSON.parse(published.at(-1)!.result!)).toMatchObject({ degraded: true });
  });

  it('never retries a 400: the run fails and dies in the DLQ with its original bytes', async () => {
    const { exec, llmCalls, published, deadLetters, retries } = executor([], laterSteps(), [badRequest()]);
    expect(await exec.execute(run, ATTEMPT)).toBe('failed');
    expect(llmCalls()).toBe(1);
    expect(retries).toHaveLength(0);
    expect(published.at(-1)!.error).toMatchObject({ code: 'dependency_error', retryable: false });
    expect(deadLetters).toHaveLength(1);
    expect(deadLetters[0]!.envelope).toMatchObject({ runId: run.runId, tenantId: 'tenant-a', originalTopic: 'sluice.runs.interactive', originalOffset: '7', errorClass: 'dependency_error' });
    expect(deadLetters[0]!.envelope.payload.toString()).toBe('original bytes');
    expect(deadLetters[0]!.headers['sluice-dlt-reason']).toBe('non_retryable');
  });

  const rateLimited = (retryAfterSec: number) => Anthropic.APIError.generate(429, { type: 'error', error: { type: 'rate_limit_error', message: 'slow down' } }, 'rate limited', new Headers({ 'retry-after': String(retryAfterSec) }));

  it('does not wait out a provider\'s retry-after holding the run\'s permits: the run goes through the retry topic, due then', async () => {
    const { exec, llmCalls, retries, published } = executor([], laterSteps(), [rateLimited(2)]);
    expect(await exec.execute(run, ATTEMPT)).toBe('retried');
    expect(llmCalls()).toBe(1);
    expect(retries).toHaveLength(1);
    expect(retries[0]!.run).toMatchObject({ attempt: 2, dueAt: NOW + 2_000 });
    expect(retries[0]!.headers).toMatchObject({ 'sluice-retry-failures': '1' });
    expect(published.at(-1)).toMatchObject({ status: 'waiting_dependency' });
  });

  it('does not make an interactive run wait for a retry past its wait share: its fallback answers now (a batch run waits)', async () => {
    const short = { ...run, admittedAt: NOW - 20_000, deadline: NOW + 20_000 };
    const interactive = executor([], laterSteps(), [rateLimited(2)]);
    // admitted 20 s ago with 20 s left: a retry due at NOW + 2 s would be in time, but later than half its 40 s (NOW) plus what its steps need
    expect(await interactive.exec.execute(short, ATTEMPT)).toBe('completed');
    expect(interactive.retries).toHaveLength(0);
    expect(interactive.published.at(-1)).toMatchObject({ status: 'completed' });
    expect(JSON.parse(interactive.published.at(-1)!.result!)).toMatchObject({ degraded: true });
    const batch = executor([], laterSteps(), [rateLimited(2)]);
    expect(await batch.exec.execute({ ...short, class: 'batch' }, ATTEMPT)).toBe('retried');
  });

  it('sends a step retry longer than processor.maxInlineRetryWaitMs through the retry topic, and waits in place for a shorter one', async () => {
    const config = loadConfig({ env: {} });
    config.processor.maxInlineRetryWaitMs = 100;
    // Full jitter with random 0.5 on the anthropic policy's base: longer than 100 ms.
    const long = executor([], laterSteps(), [overloaded()], config, { deps: { random: () => 0.5 } });
    expect(await long.exec.execute(run, ATTEMPT)).toBe('retried');
    expect(long.llmCalls()).toBe(1);
    expect(long.retries[0]!.run.dueAt).toBeGreaterThan(NOW + 100);
    const short = executor([], laterSteps(), [overloaded()], config);
    expect(await short.exec.execute(run, ATTEMPT)).toBe('completed');
    expect(short.llmCalls()).toBe(2);
  });

  it('a step retry sent through the retry topic counts as a failed attempt: with the attempts used up the dependency is gone', async () => {
    const { exec, retries, published } = executor([], laterSteps(), [rateLimited(2)]);
    expect(await exec.execute(run, { ...ATTEMPT, priorFailures: 2 })).toBe('completed');
    expect(retries).toHaveLength(0);
    expect(JSON.parse(published.at(-1)!.result!)).toMatchObject({ degraded: true });
  });

  it('does not retry a step once the dependency\'s retry budget is spent', async () => {
    const config = loadConfig({ env: {} });
    config.dependencies.anthropic!.retry.budgetMinRetries = 0;
    const { exec, llmCalls, retries } = executor([], laterSteps(), [overloaded()], config);
    expect(await exec.execute(run, ATTEMPT)).toBe('retried');
    expect(llmCalls()).toBe(1); // one call in the window: 10% of it is not a whole retry
    expect(retries).toHaveLength(1);
  });

  it('moves an adaptive dependency\'s figure by each call, before its permit goes back: a 529 cuts, the retried success grows it', async () => {
    const config = loadConfig({ env: {} });
    config.dependencies.anthropic!.adaptiveConcurrency = { min: 1, decreaseFactor: 0.5, cooldownMs: 1_000, idleResetMs: 60_000 };
    const events: string[] = [];
    const deps: Partial<RunExecutorDeps> = {
      dependencyPermits: { acquire: async (d) => (events.push(`acquire ${d}`), async () => void events.push(`release ${d}`)) },
      adaptiveLimits: { apply: async (d, signal) => (events.push(`${signal} ${d}`), { limit: 1, cut: false }) },
    };
    const { exec } = executor([], laterSteps(), [overloaded()], config, { deps });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(events).toEqual(['acquire anthropic', 'congestion anthropic', 'release anthropic', 'acquire anthropic', 'success anthropic', 'release anthropic']);
  });
});

const lastAttempt = { ...ATTEMPT, priorFailures: 2 };
const tenantC: RunRequested = { ...run, tenantId: 'tenant-c' };

describe('RunExecutor fallback policy once a dependency is unavailable', () => {
  const overloaded = () => Anthropic.APIError.generate(529, { type: 'error', error: { type: 'overloaded_error', message: 'busy' } }, 'overloaded', new Headers());

  it('degrade: the run attempts used up, tenant-a gets the workflow\'s declared fallback, marked degraded', async () => {
    const config = loadConfig({ env: {} });
    const { exec, published, deadLetters } = executor([], new Map(), [overloaded(), overloaded()], config);
    expect(await exec.execute(run, lastAttempt)).toBe('completed');
    const result = JSON.parse(published.at(-1)!.result!);
    expect(result).toMatchObject({ degraded: true, text: config.workflows['support-reply']!.fallback!.text, unavailable: [{ dependency: 'anthropic' }] });
    expect(published.at(-1)!.message).toMatch(/^completed degraded: anthropic unavailable/);
    expect(deadLetters).toHaveLength(0);
  });

  it('degrade without a declared fallback fails rather than invent an answer', async () => {
    const config = loadConfig({ env: {} });
    delete config.workflows['support-reply']!.fallback;
    const { exec, published } = executor([], new Map(), [overloaded(), overloaded()], config);
    expect(await exec.execute(run, lastAttempt)).toBe('failed');
    expect(published.at(-1)!.error).toMatchObject({ code: 'dependency_unavailable' });
  });

  it('fail: tenant-c\'s run fails with dependency_unavailable and goes to the DLQ', async () => {
    const { exec, published, deadLetters } = executor([], new Map(), [overloaded(), overloaded()]);
    expect(await exec.execute(tenantC, lastAttempt)).toBe('failed');
    expect(published.at(-1)).toMatchObject({ status: 'failed', step: 'understand', result: null, error: { code: 'dependency_unavailable', retryable: true } });
    expect(deadLetters[0]!.headers['sluice-dlt-reason']).toBe('dependency_unavailable');
  });
});

describe('RunExecutor and the shared breakers', () => {
  const openUntil = (name: string, retryAt: number): BreakerView => ({ name, state: 'open', retryAt });

  it('an interactive run that cannot wait for the next probe gets its fallback at once, with no call made', async () => {
    const { exec, llmCalls, published, retries } = executor([], new Map(), [], undefined, { breaker: openUntil('anthropic', run.deadline + 1_000) });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(llmCalls()).toBe(0);
    expect(retries).toHaveLength(0);
    expect(JSON.parse(published.at(-1)!.result!)).toMatchObject({ degraded: true });
  });

  it('tenant-c in the same spot fails explicitly', async () => {
    const { exec, llmCalls, published, metrics } = executor([], new Map(), [], undefined, { breaker: openUntil('anthropic', run.deadline + 1_000) });
    expect(await exec.execute(tenantC, ATTEMPT)).toBe('failed');
    expect(llmCalls()).toBe(0);
    expect(published.at(-1)!.error).toMatchObject({ code: 'dependency_unavailable' });
    const counted = async (name: string) => (await metrics.registry.getSingleMetricAsString(name)).split('\n').filter((l) => !l.startsWith('#'));
    expect(await counted('sluice_fallbacks_total')).toEqual(['sluice_fallbacks_total{tenant="tenant-c",dependency="anthropic",policy="fail"} 1']);
    expect(await counted('sluice_breaker_refusals_total')).toEqual(['sluice_breaker_refusals_total{dependency="anthropic"} 1']);
    expect(await counted('sluice_dead_letters_total')).toEqual(['sluice_dead_letters_total{topic="sluice.runs.interactive",reason="dependency_unavailable"} 1']);
  });

  it('a run that can wait is re-enqueued for the next probe, and waiting does not count as a failure', async () => {
    const { exec, llmCalls, published, retries, metrics } = executor([], new Map(), [], undefined, { breaker: openUntil('anthropic', NOW + 5_000) });
    expect(await exec.execute(run, ATTEMPT)).toBe('retried');
    expect(await metrics.registry.getSingleMetricAsString('sluice_run_retries_total')).toContain('sluice_run_retries_total{reason="breaker_open"} 1');
    expect(llmCalls()).toBe(0);
    expect(retries[0]!.run).toMatchObject({ attempt: 2, dueAt: NOW + 5_000 });
    expect(retries[0]!.headers['sluice-retry-failures']).toBe('0');
    expect(published.at(-1)!.message).toMatch(/^waiting for anthropic \(breaker open\); attempt 2 at /);
  });

  it('a batch run waits even past its deadline: it is due at the deadline and then expires', async () => {
    const batch: RunRequested = { ...run, class: 'batch' };
    const { exec, retries } = executor([], new Map(), [], undefined, { breaker: openUntil('anthropic', run.deadline + 60_000) });
    expect(await exec.execute(batch, ATTEMPT)).toBe('retried');
    expect(retries[0]!.run.dueAt).toBe(run.deadline);
  });

  it('a refusal from Redis (another instance saw it open first) is treated like an open breaker', async () => {
    const { exec, llmCalls, retries } = executor([], new Map(), [], undefined, { admit: [{ allowed: false, state: 'open', retryAt: NOW + 2_000 }] });
    expect(await exec.execute(run, ATTEMPT)).toBe('retried');
    expect(llmCalls()).toBe(0);
    expect(retries[0]!.run.dueAt).toBe(NOW + 2_000);
  });

  it('refused while half-open (probes taken), it looks again within openMs, not at the probes\' lease expiry', async () => {
    const { exec, retries } = executor([], new Map(), [], undefined, { admit: [{ allowed: false, state: 'half_open', retryAt: NOW + 60_000 }] });
    expect(await exec.execute(run, ATTEMPT)).toBe('retried');
    expect(retries[0]!.run.dueAt).toBe(NOW + 5_000);
  });

  it('an unavailable tool is passed on to the LLM as {unavailable, reason}, and the answer is marked degraded', async () => {
    const prompts: string[] = [];
    const llm: RunExecutorDeps['llm'] = async (r) => {
      prompts.push(r.messages[0]!.content as string);
      return { text: 'ok', content: [{ type: 'text', text: 'ok' }], model: 'sim', stopReason: 'end_turn', answerBytes: 2, usage: { inputTokens: 1, outputTokens: 1, cacheReadTokens: 0, cacheCreationTokens: 0 } };
    };
    const { exec, published } = executor([], new Map([['understand', { text: 'order 42' }]]), [], undefined, { breaker: openUntil('order-lookup', run.deadline + 1), deps: { llm } });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(prompts).toHaveLength(1);
    expect(prompts[0]).toContain('"unavailable":true');
    const result = JSON.parse(published.at(-1)!.result!);
    expect(result).toMatchObject({ degraded: true, text: 'ok', unavailable: [{ dependency: 'order-lookup' }] });
    // A degraded answer carries its usage too: the one call made ('sim' is filed under the configured model).
    expect(result.usage).toMatchObject({ inputTokens: 1, outputTokens: 1, llmCalls: 1, byModel: { 'claude-sonnet-4-6': { llmCalls: 1 } } });
    expect(result.steps[1]).toMatchObject({ id: 'lookup-order', output: { unavailable: true } });
  });

  it('tells the breaker a failed call\'s outcome at once, under the probe token when the call was a probe', async () => {
    const badRequest = () => Anthropic.APIError.generate(400, { type: 'error', error: { type: 'invalid_request_error', message: 'no' } }, 'bad', new Headers());
    const { exec, recorded } = executor([], new Map([['lookup-order', {}], ['reply', { text: 'x' }]]), [Anthropic.APIError.generate(529, {}, 'busy', new Headers()), badRequest()], undefined, {
      admit: [{ allowed: true, probe: true }, { allowed: true, probe: false }],
    });
    expect(await exec.execute(run, ATTEMPT)).toBe('failed');
    // The 400 is a prompt success of a call that was no probe: counted here, sent in bulk later (CallGuard.record).
    expect(recorded).toEqual([{ dependency: 'anthropic', token: `${run.runId}:1:understand:1`, outcome: 'failure' }]);
  });

  it('does not blame the dependency for a timeout its own budgets did not cause: the run\'s deadline cut the call short', async () => {
    const timedOut = () => {
      const llm = async (): Promise<LlmResult> => {
        throw new StepError('total_timeout', 'anthropic', 'anthropic: no complete answer in time', true);
      };
      return { admit: [{ allowed: true as const, probe: true }], deps: { llm } };
    };
    // local.yaml gives anthropic 35 s in all: a run with 30 s left clamps the call to them.
    const clamped = executor([], new Map(), [], undefined, timedOut());
    await clamped.exec.execute({ ...run, deadline: NOW + 30_000 }, ATTEMPT);
    expect(clamped.recorded).toEqual([{ dependency: 'anthropic', token: `${run.runId}:1:understand:1`, outcome: 'released' }]);
    const own = executor([], new Map(), [], undefined, timedOut());
    await own.exec.execute({ ...run, deadline: NOW + 3_600_000 }, ATTEMPT);
    expect(own.recorded[0]).toEqual({ dependency: 'anthropic', token: `${run.runId}:1:understand:1`, outcome: 'failure' });
  });

  it('publishes one waiting event in the attempt\'s slot 0 for a run held before it starts', async () => {
    const { exec, published } = executor([]);
    await exec.publishHeld(run, 'anthropic', NOW + 5_000);
    expect(published[0]).toMatchObject({ status: 'waiting_dependency', sequence: heldSequence(1) });
    expect(published[0]!.message).toBe(`waiting for anthropic (breaker open); next probe at ${new Date(NOW + 5_000).toISOString()}`);
  });
});

describe('RunExecutor at a deadline: batch expiries are archived, interactive ones only reported', () => {
  const batch: RunRequested = { ...run, workflow: 'report-digest', class: 'batch' };

  it('dead-letters an expired batch run (reason expired, original bytes) before publishing expired', async () => {
    const order: string[] = [];
    const { exec, metrics } = executor([], new Map(), [], undefined, {
      deps: {
        publishStatus: async (e) => void order.push(`status:${e.status}`),
        deadLetters: { publishDeadLetter: async (envelope, headers) => void order.push(`dlq:${headers['sluice-dlt-reason']}:${envelope.payload.toString()}`) },
      },
    });
    expect(await exec.execute({ ...batch, deadline: NOW - 1 }, ATTEMPT)).toBe('expired');
    expect(order).toEqual(['dlq:expired:original bytes', 'status:expired']);
    expect(await metrics.registry.getSingleMetricAsString('sluice_dead_letters_total')).toContain('sluice_dead_letters_total{topic="sluice.runs.interactive",reason="expired"} 1');
  });

  it('archives the failure context a replay and an operator need', async () => {
    const { exec, published, deadLetters } = executor([]);
    expect(await exec.execute({ ...batch, deadline: NOW }, { ...ATTEMPT, priorFailures: 2, firstFailureAt: NOW - 90_000 })).toBe('expired');
    expect(deadLetters).toHaveLength(1);
    expect(deadLetters[0]!.envelope).toMatchObject({ runId: run.runId, tenantId: 'tenant-a', workflow: 'report-digest', errorClass: 'deadline_exceeded', errorMessage: 'the deadline passed before it started', firstFailureAt: NOW - 90_000 });
    expect(published.at(-1)).toMatchObject({ status: 'expired', error: { code: 'deadline_exceeded' } });
  });

  it('dead-letters a batch run whose deadline passes during a step', async () => {
    let now = NOW;
    const { exec, deadLetters, published } = executor([], new Map(), [], undefined, {
      deps: {
        now: () => now,
        llm: async () => {
          now = batch.deadline + 1;
          throw toStepError('anthropic', Anthropic.APIError.generate(529, {}, 'busy', new Headers()));
        },
      },
    });
    expect(await exec.execute(batch, ATTEMPT)).toBe('expired');
    expect(deadLetters[0]!.headers['sluice-dlt-reason']).toBe('expired');
    expect(deadLetters[0]!.envelope.errorMessage).toBe('the deadline passed during step 1/5 (plan)');
    expect(published.at(-1)!.status).toBe('expired');
  });

  it('only reports an expired interactive run: a late answer is useless, so there is nothing to replay', async () => {
    const { exec, published, deadLetters } = executor([]);
    expect(await exec.execute({ ...run, deadline: NOW - 1 }, ATTEMPT)).toBe('expired');
    expect(deadLetters).toHaveLength(0);
    expect(published.at(-1)).toMatchObject({ status: 'expired', error: { code: 'deadline_exceeded' } });
  });
});

describe('RunExecutor with a tenant or workflow no longer configured', () => {
  it('dead-letters the run as unknown_tenant or unknown_workflow, calling nothing', async () => {
    for (const [r, reason, message] of [
      [{ ...run, tenantId: 'tenant-gone' }, 'unknown_tenant', 'tenant "tenant-gone" is not configured on this processor'],
      [{ ...run, workflow: 'retired-flow' }, 'unknown_workflow', 'workflow "retired-flow" is not configured on this processor'],
    ] as const) {
      const { exec, published, deadLetters, llmCalls } = executor([]);
      expect(await exec.execute(r, ATTEMPT)).toBe('failed');
      expect(llmCalls()).toBe(0);
      expect(deadLetters[0]!.headers['sluice-dlt-reason']).toBe(reason);
      expect(published).toHaveLength(1);
      expect(published[0]).toMatchObject({ status: 'failed', message: `failed: ${message}`, error: { code: reason, message, retryable: false } });
    }
  });

  it('deadLetter() ends any run the same way: archived with the given reason, then failed', async () => {
    const { exec, published, deadLetters } = executor([]);
    const failure: RunFailure = { reason: 'infrastructure_error', code: 'infrastructure_error', message: 'gave up after 8 failed attempts: taking run permits (Redis) failed: Command timed out', retryable: true };
    expect(await exec.deadLetter(run, ATTEMPT, failure)).toBe('failed');
    expect(deadLetters[0]!.headers).toMatchObject({ 'sluice-dlt-reason': 'infrastructure_error', 'sluice-dlt-exception-message': failure.message });
    expect(deadLetters[0]!.envelope.payload.toString()).toBe('original bytes');
    expect(published.at(-1)).toMatchObject({ status: 'failed', sequence: terminalSequence(1), error: { code: 'infrastructure_error', message: failure.message, retryable: true } });
  });
});

describe('RunExecutor names the infrastructure call that failed, so the attempt can be repeated', () => {
  const failing = (message: string) => async () => Promise.reject(new Error(message));
  const rejection = async (p: Promise<unknown>) => p.then(() => undefined, (err: unknown) => err);

  it('the shared breaker (Redis) during admission', async () => {
    const { exec, llmCalls, deadLetters } = executor([], new Map(), [], undefined, { deps: { breakers: { admit: failing('Connection is closed.'), record: async () => ({ state: 'closed', changed: false }), tally: async () => true } } });
    const err = await rejection(exec.execute(run, ATTEMPT));
    expect(err).toBeInstanceOf(InfrastructureError);
    expect(err).toMatchObject({ operation: 'breaker_admission', message: 'asking the shared breaker for anthropic (Redis) failed: Connection is closed.' });
    expect(llmCalls()).toBe(0);
    expect(deadLetters).toHaveLength(0);
  });

  it('a dependency permit (Redis), while a permit wait that reached the deadline still expires the run', async () => {
    const { exec } = executor([], new Map(), [], undefined, { deps: { dependencyPermits: { acquire: failing('Command timed out') } } });
    expect(await rejection(exec.execute(run, ATTEMPT))).toMatchObject({ operation: 'dependency_permit', message: 'taking a dependency permit for anthropic (Redis) failed: Command timed out' });
    let now = NOW;
    const late = executor([], new Map(), [], undefined, {
      deps: {
        now: () => now,
        dependencyPermits: {
          acquire: async () => {
            now = run.deadline;
            throw new StepError('deadline', 'anthropic', 'anthropic: no permit before the deadline (16/16 in use)', false);
          },
        },
      },
    });
    expect(await late.exec.execute(run, ATTEMPT)).toBe('expired');
  });

  it('the retry topic (Kafka)', async () => {
    const overloaded = () => Anthropic.APIError.generate(529, {}, 'busy', new Headers());
    const { exec } = executor([], new Map(), [overloaded(), overloaded()], undefined, { deps: { enqueueRetry: failing('KafkaJSRequestTimeoutError') } });
    expect(await rejection(exec.execute(run, ATTEMPT))).toMatchObject({ operation: 'retry_enqueue', message: 'producing the next attempt to the retry topic (Kafka) failed: KafkaJSRequestTimeoutError' });
  });

  it('the DLQ topic (Kafka): the run is not reported failed before its dead letter is acknowledged', async () => {
    const { exec, published } = executor([], new Map(), [], undefined, { deps: { deadLetters: { publishDeadLetter: failing('KafkaJSConnectionError') } } });
    expect(await rejection(exec.execute({ ...run, tenantId: 'tenant-gone' }, ATTEMPT))).toMatchObject({ operation: 'dead_letter', message: 'producing to the DLQ topic (Kafka) failed: KafkaJSConnectionError' });
    expect(published).toHaveLength(0);
  });

  it('the outcome event (Kafka), after its own three tries', async () => {
    let tries = 0;
    const { exec, metrics } = executor([], new Map(), [], undefined, {
      deps: {
        publishStatus: async (e) => {
          if (e.status !== 'running') tries++;
          if (e.status !== 'running') throw new Error('KafkaJSNumberOfRetriesExceeded');
        },
      },
    });
    expect(await rejection(exec.execute({ ...run, tenantId: 'tenant-a' }, ATTEMPT))).toMatchObject({ operation: 'outcome_publish', message: 'publishing the run outcome (Kafka) failed: KafkaJSNumberOfRetriesExceeded' });
    expect(tries).toBe(3);
    // Not ended yet: the attempt is repeated, and the run's end is measured when its outcome is out.
    expect((await histogramValue(metrics.runEndToEnd, {})).count).toBe(0);
  }, 10_000);
});

describe('RunExecutor bounds what it keeps of step outputs', () => {
  const bounded = (maxStepOutputBytes: number, maxResultBytes: number) => {
    const config = loadConfig({ env: {} });
    config.processor.maxStepOutputBytes = maxStepOutputBytes;
    config.processor.maxResultBytes = maxResultBytes;
    return config;
  };

  it('fails the run with output_too_large when a step answers more than maxStepOutputBytes, and stores nothing of it', async () => {
    const journal = new Map<string, unknown>();
    const { exec, published, deadLetters } = executor([], journal, [], bounded(2_048, 100_000), { llmText: 'x'.repeat(2_100) });
    expect(await exec.execute(run, ATTEMPT)).toBe('failed');
    expect(journal.size).toBe(0);
    const message = 'step 1/3 (understand): its output is 2224 bytes, over the bound of 2048 (processor.maxStepOutputBytes)';
    expect(published.at(-1)).toMatchObject({ status: 'failed', step: 'understand', result: null, error: { code: 'output_too_large', message, retryable: false } });
    expect(deadLetters[0]!.headers['sluice-dlt-reason']).toBe('non_retryable');
  });

  it('keeps an output exactly at the bound', async () => {
    const journal = new Map<string, unknown>([['lookup-order', { orderId: '42' }]]);
    const { exec } = executor([], journal, [], bounded(2_224, 100_000), { llmText: 'x'.repeat(2_100) });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(journal.size).toBe(3);
  });

  it('applies the bound to an output recalled from the journal too (the bound may have been lowered since)', async () => {
    const journal = new Map<string, unknown>([['understand', { text: 'y'.repeat(5_000) }]]);
    const { exec, published, llmCalls } = executor([], journal, [], bounded(2_048, 100_000));
    expect(await exec.execute(run, ATTEMPT)).toBe('failed');
    expect(llmCalls()).toBe(0);
    expect(published.at(-1)!.error).toMatchObject({ code: 'output_too_large' });
  });

  it('fails with result_too_large as soon as the outputs together pass maxResultBytes, before calling further steps', async () => {
    const journal = new Map<string, unknown>([['lookup-order', { orderId: '4'.repeat(1_100) }]]);
    const { exec, published, llmCalls } = executor([], journal, [], bounded(2_048, 3_000), { llmText: 'x'.repeat(1_900) });
    expect(await exec.execute(run, ATTEMPT)).toBe('failed');
    expect(published.at(-1)).toMatchObject({ step: 'lookup-order', error: { code: 'result_too_large', retryable: false } });
    expect(published.at(-1)!.error!.message).toMatch(/^step 2\/3 \(lookup-order\): the step outputs so far are \d+ bytes, over the bound of 3000/);
    expect(llmCalls()).toBe(1);
    expect([...journal.keys()].sort()).toEqual(['lookup-order', 'understand']);
  });

  it('fails with result_too_large when the result as a whole (with the answer text) would not fit in a status event', async () => {
    const journal = new Map<string, unknown>([['understand', { text: 'a' }], ['lookup-order', { orderId: '42' }], ['reply', { text: 'z'.repeat(2_000) }]]);
    const { exec, published } = executor([], journal, [], bounded(2_048, 3_000));
    expect(await exec.execute(run, ATTEMPT)).toBe('failed');
    expect(published.at(-1)).toMatchObject({ status: 'failed', step: null, result: null, error: { code: 'result_too_large' } });
    expect(published.at(-1)!.error!.message).toMatch(/^the result is \d+ bytes, over the bound of 3000 \(processor\.maxResultBytes\)$/);
  });
});

describe('RunExecutor measures a run against its admission', () => {
  const overloaded = () => Anthropic.APIError.generate(529, { type: 'error', error: { type: 'overloaded_error', message: 'busy' } }, 'overloaded', new Headers());
  const interactive = { class: 'interactive' };
  /** The run was admitted a second before the executor's clock (NOW). */
  const sinceAdmission = 1;

  it('observes the first step answered, once, and the run\'s end with its status', async () => {
    let now = NOW;
    const { exec, metrics } = executor([], new Map([['lookup-order', { orderId: '42' }]]), [], undefined, {
      deps: {
        now: () => now,
        llm: async () => {
          now += 500;
          return { text: 'ok', content: [{ type: 'text', text: 'ok' }], model: 'claude-sonnet-4-6', stopReason: 'end_turn', answerBytes: 2, usage: { inputTokens: 1, outputTokens: 1, cacheReadTokens: 0, cacheCreationTokens: 0 } };
        },
      },
    });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    // Two LLM steps answered, the first at 1.5 s after admission; the end at 2 s.
    expect(await histogramValue(metrics.runFirstOutput, interactive)).toEqual({ count: 1, sum: 1.5 });
    expect(await histogramValue(metrics.runEndToEnd, { class: 'interactive', status: 'completed' })).toEqual({ count: 1, sum: 2 });
  });

  it('never observes a first output for a step taken from the journal: the delivery that answered it did', async () => {
    const { exec, metrics, llmCalls } = executor([], new Map([['understand', { text: 'order 42' }], ['lookup-order', { orderId: '42' }]]));
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(llmCalls()).toBe(1);
    expect((await histogramValue(metrics.runFirstOutput, interactive)).count).toBe(0);
    expect(await histogramValue(metrics.runEndToEnd, { class: 'interactive', status: 'completed' })).toEqual({ count: 1, sum: sinceAdmission });
  });

  it('tells the next attempt whether the run had its output; the next attempt then observes none', async () => {
    // The first step is answered, the last one keeps failing: the run goes to the retry topic.
    let calls = 0;
    const llm = async (): Promise<LlmResult> => {
      if (++calls > 1) throw toStepError('anthropic', overloaded());
      return { text: 'ok', content: [{ type: 'text', text: 'ok' }], model: 'sim', stopReason: 'end_turn', answerBytes: 2, usage: { inputTokens: 1, outputTokens: 1, cacheReadTokens: 0, cacheCreationTokens: 0 } };
    };
    const answeredFirst = executor([], new Map([['lookup-order', {}]]), [], undefined, { deps: { llm } });
    expect(await answeredFirst.exec.execute(run, ATTEMPT)).toBe('retried');
    expect((await histogramValue(answeredFirst.metrics.runFirstOutput, interactive)).count).toBe(1);
    expect(answeredFirst.retries[0]!.headers[RETRY_HEADER.outputSeen]).toBe('true');
    // A retried attempt: no waiting, not an end.
    expect((await histogramValue(answeredFirst.metrics.runEndToEnd, {})).count).toBe(0);

    // Waiting for an open breaker before any step: nothing answered yet.
    const nothingYet = executor([], new Map(), [], undefined, { breaker: { name: 'anthropic', state: 'open', retryAt: NOW + 5_000 } });
    expect(await nothingYet.exec.execute(run, ATTEMPT)).toBe('retried');
    expect(nothingYet.retries[0]!.headers[RETRY_HEADER.outputSeen]).toBe('false');

    // The next attempt of a run whose output an earlier attempt had (a step before this one may
    // have been a stand-in then, so the journal need not show it) observes none.
    const next = executor([], new Map([['lookup-order', {}]]));
    expect(await next.exec.execute({ ...run, attempt: 2, dueAt: NOW }, { ...ATTEMPT, outputSeen: true })).toBe('completed');
    expect((await histogramValue(next.metrics.runFirstOutput, interactive)).count).toBe(0);
    expect((await histogramValue(next.metrics.runEndToEnd, { class: 'interactive', status: 'completed' })).count).toBe(1);
  });

  it('does not take a stand-in for a dependency\'s answer: the first output is the first step actually answered', async () => {
    const batchTools = loadConfig({ env: {} });
    // A workflow that starts with a tool, so a stand-in can come before any answer.
    batchTools.workflows['support-reply']!.steps = [batchTools.workflows['support-reply']!.steps[1]!, batchTools.workflows['support-reply']!.steps[2]!];
    let now = NOW;
    const { exec, metrics } = executor([], new Map(), [], batchTools, {
      breaker: { name: 'order-lookup', state: 'open', retryAt: run.deadline + 1 },
      deps: {
        now: () => now,
        llm: async () => {
          now += 250;
          return { text: 'ok', content: [{ type: 'text', text: 'ok' }], model: 'sim', stopReason: 'end_turn', answerBytes: 2, usage: { inputTokens: 1, outputTokens: 1, cacheReadTokens: 0, cacheCreationTokens: 0 } };
        },
      },
    });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(await histogramValue(metrics.runFirstOutput, interactive)).toEqual({ count: 1, sum: 1.25 });
  });

  it('observes every way a run ends, with its status, measured to the outcome event\'s time', async () => {
    const ends: [RunRequested, string, string[]][] = [
      [{ ...run, deadline: NOW - 1 }, 'expired', []],
      [run, 'cancelled', ['requested']],
      [tenantC, 'failed', []],
    ];
    for (const [r, status, cancel] of ends) {
      const { exec, metrics } = executor(cancel as CancelReason[], new Map(), [], undefined, status === 'failed' ? { breaker: { name: 'anthropic', state: 'open', retryAt: run.deadline + 1_000 } } : {});
      expect(await exec.execute(r, ATTEMPT)).toBe(status);
      expect(await histogramValue(metrics.runEndToEnd, { class: 'interactive', status })).toEqual({ count: 1, sum: sinceAdmission });
      expect((await histogramValue(metrics.runFirstOutput, interactive)).count).toBe(0);
    }
    // A run the dispatcher ends (unknown tenant, infrastructure given up) is measured the same way.
    const { exec, metrics } = executor([]);
    await exec.deadLetter({ ...run, class: 'batch' }, ATTEMPT, { reason: 'infrastructure_error', code: 'infrastructure_error', message: 'gave up', retryable: true });
    expect(await histogramValue(metrics.runEndToEnd, { class: 'batch', status: 'failed' })).toEqual({ count: 1, sum: sinceAdmission });
  });

  it('reads a processor clock behind the API\'s as 0 s since admission', async () => {
    const { exec, metrics } = executor([], new Map([['lookup-order', {}]]));
    expect(await exec.execute({ ...run, admittedAt: NOW + 3_000 }, ATTEMPT)).toBe('completed');
    expect(await histogramValue(metrics.runEndToEnd, { class: 'interactive', status: 'completed' })).toEqual({ count: 1, sum: 0 });
  });
});

describe('RunExecutor counts the tokens of LLM responses', () => {
  const answer =
    (model: string, usage: LlmResult['usage'], text = 'ok') =>
    async (): Promise<LlmResult> => ({ text, content: [{ type: 'text', text }], model, stopReason: 'end_turn', answerBytes: Buffer.byteLength(text), usage });
  const tokens = (metrics: ReturnType<typeof createMetrics>, labels: Record<string, string>) => metricValue(metrics.llmTokens, labels);

  it('per tenant, workflow, model and kind, every kind from the response\'s usage', async () => {
    const { exec, metrics } = executor([], new Map([['lookup-order', {}]]), [], undefined, {
      deps: { llm: answer('claude-sonnet-4-6', { inputTokens: 120, outputTokens: 30, cacheReadTokens: 1_024, cacheCreationTokens: 8 }) },
    });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    const labels = { tenant: 'tenant-a', workflow: 'support-reply', model: 'claude-sonnet-4-6' };
    // Two LLM steps.
    expect(await tokens(metrics, { ...labels, kind: 'input' })).toBe(240);
    expect(await tokens(metrics, { ...labels, kind: 'output' })).toBe(60);
    expect(await tokens(metrics, { ...labels, kind: 'cache_read' })).toBe(2_048);
    expect(await tokens(metrics, { ...labels, kind: 'cache_creation' })).toBe(16);
  });

  it('labels a model the config does not name with the dependency\'s configured model', async () => {
    const { exec, metrics } = executor([], new Map([['lookup-order', {}]]), [], undefined, {
      deps: { llm: answer('some-proxy/"model"', { inputTokens: 5, outputTokens: 1, cacheReadTokens: 0, cacheCreationTokens: 0 }) },
    });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    const { values } = await metrics.llmTokens.get();
    expect([...new Set(values.map((v) => v.labels.model))]).toEqual(['claude-sonnet-4-6']);
    expect(await tokens(metrics, { model: 'claude-sonnet-4-6', kind: 'input' })).toBe(10);
  });

  it('counts the cost of a priced model, and the completed result carries the run\'s usage', async () => {
    const { exec, metrics, published } = executor([], new Map([['lookup-order', {}]]), [], undefined, {
      deps: { llm: answer('claude-sonnet-4-6', { inputTokens: 1_000, outputTokens: 100, cacheReadTokens: 10_000, cacheCreationTokens: 0 }) },
    });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    // Per call: 1,000 × $3 + 100 × $15 + 10,000 × $0.30 per million tokens = $0.0075.
    expect(await metricValue(metrics.llmCost, { tenant: 'tenant-a', workflow: 'support-reply', model: 'claude-sonnet-4-6' })).toBeCloseTo(0.015, 12);
    const result = JSON.parse(published.at(-1)!.result!);
    const tokens = { inputTokens: 2_000, outputTokens: 200, cacheCreationInputTokens: 0, cacheReadInputTokens: 20_000, llmCalls: 2, costUsd: 0.015 };
    expect(result.usage).toEqual({ ...tokens, byModel: { 'claude-sonnet-4-6': tokens } });
    expect(result.steps[0].output.usage).toEqual({ inputTokens: 1_000, outputTokens: 100, cacheCreationInputTokens: 0, cacheReadInputTokens: 10_000 });
  });

  it('sums a step the journal kept from an earlier attempt into the result\'s usage, without counting it again', async () => {
    const kept = { text: 'order 42', model: 'claude-sonnet-4-6', usage: { inputTokens: 1_000_000, outputTokens: 0, cacheCreationInputTokens: 0, cacheReadInputTokens: 0 } };
    const { exec, metrics, published } = executor([], new Map<string, unknown>([['understand', kept], ['lookup-order', {}]]), [], undefined, {
      deps: { llm: answer('claude-sonnet-4-6', { inputTokens: 1_000_000, outputTokens: 0, cacheReadTokens: 0, cacheCreationTokens: 0 }, '') },
    });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(await metricValue(metrics.llmCost, { model: 'claude-sonnet-4-6' })).toBe(3);
    expect(JSON.parse(published.at(-1)!.result!).usage).toMatchObject({ inputTokens: 2_000_000, llmCalls: 2, costUsd: 6 });
  });

  it('counts an answer\'s output from its bytes when its usage reports fewer tokens than they can be, for the metrics, the budget and the result', async () => {
    const llm = async (): Promise<LlmResult> => ({ text: 'x'.repeat(20_000), content: [{ type: 'text', text: 'x'.repeat(20_000) }], model: 'claude-sonnet-4-6', stopReason: 'end_turn', answerBytes: 20_000, usage: { inputTokens: 10, outputTokens: 1, cacheReadTokens: 0, cacheCreationTokens: 0 } });
    const charged: number[] = [];
    const tokenSettlement = { charge: async (_run: RunRequested, tokens: number) => void charged.push(tokens), endAttempt: async () => undefined };
    const { exec, metrics, published } = executor([], new Map([['lookup-order', {}]]), [], undefined, { deps: { llm, tokenSettlement } });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    // 20,000 bytes are at least 1,250 tokens at 16 bytes a token: 1 is implausible, so they count as 5,000 (4 bytes a token).
    expect(charged).toEqual([5_010, 5_010]);
    expect(await tokens(metrics, { model: 'claude-sonnet-4-6', kind: 'output' })).toBe(10_000);
    expect(await metricValue(metrics.llmImplausibleUsage, { dependency: 'anthropic' })).toBe(2);
    const result = JSON.parse(published.at(-1)!.result!);
    expect(result.steps[0].output.usage).toMatchObject({ inputTokens: 10, outputTokens: 5_000 });
    expect(result.usage).toMatchObject({ outputTokens: 10_000, llmCalls: 2 });
  });

  it('counts nothing for a step taken from the journal: no call, no tokens', async () => {
    const { exec, metrics } = executor([], new Map<string, unknown>([['understand', { text: 'a' }], ['lookup-order', {}], ['reply', { text: 'b' }]]));
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect((await metrics.llmTokens.get()).values).toEqual([]);
  });
});

describe('RunExecutor token settlement', () => {
  function recording() {
    const calls: Array<[string, number | string | undefined]> = [];
    const tokenSettlement = {
      charge: async (_run: RunRequested, tokens: number) => void calls.push(['charge', tokens]),
      endAttempt: async (_run: RunRequested, outcome: string | undefined) => void calls.push(['end', outcome]),
    };
    return { calls, tokenSettlement };
  }

  it('charges each LLM call’s input+output tokens, then ends the attempt with its outcome', async () => {
    const { calls, tokenSettlement } = recording();
    const { exec } = executor([], new Map([['lookup-order', { orderId: '42' }]]), [], undefined, { deps: { tokenSettlement } });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    // support-reply: two LLM steps (1 input + 1 output token each in this fake) around a tool step from the journal.
    expect(calls).toEqual([['charge', 2], ['charge', 2], ['end', 'completed']]);
  });

  it('ends the attempt of a run dead-lettered before it started, so its reservation is given back', async () => {
    const { calls, tokenSettlement } = recording();
    const { exec } = executor([], new Map(), [], undefined, { deps: { tokenSettlement } });
    await exec.deadLetter(run, ATTEMPT, { reason: 'infrastructure_error', code: 'infrastructure_error', message: 'gave up', retryable: true });
    expect(calls).toEqual([['end', 'failed']]);
  });
});

describe('RunExecutor paces calls by the dependencies\' rate limits', () => {
  /** A pacer answering each booking with the next turn (default: go now), recording what it is told. */
  function pacer(turns: (PaceTurn | Error)[] = [], fail: { settle?: Error } = {}) {
    const booked: { dependency: string; tokens: CallTokens; deadline: number; runClass: string }[] = [];
    const settled: { dependency: string; booked: CallTokens; used: CallTokens }[] = [];
    const learned: { dependency: string; response: CallResponse }[] = [];
    const fake: CallPacer = {
      giveBack: async () => undefined,
      book: async (dependency, tokens, run) => {
        booked.push({ dependency, tokens, deadline: run.deadline, runClass: run.class });
        const turn = turns.shift() ?? { kind: 'go', waitMs: 0 };
        if (turn instanceof Error) throw turn;
        return turn;
      },
      settle: async (dependency, b, used) => {
        settled.push({ dependency, booked: b, used });
        if (fail.settle) throw fail.settle;
      },
      learn: async (dependency, response) => void learned.push({ dependency, response }),
    };
    return { fake, booked, settled, learned };
  }
  const toolDone = () => new Map<string, unknown>([['lookup-order', {}]]);

  it('books each call with its estimated input and its whole output allowance, then settles by the usage reported', async () => {
    const p = pacer();
    const usage = { inputTokens: 40, outputTokens: 9, cacheReadTokens: 500, cacheCreationTokens: 6 };
    const { exec } = executor([], toolDone(), [], undefined, { deps: { pacer: p.fake, llm: async () => ({ text: 'ok', content: [{ type: 'text', text: 'ok' }], model: 'sim', stopReason: 'end_turn', answerBytes: 2, usage, headers: () => null }) } });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(p.booked).toHaveLength(2);
    expect(p.booked[0]).toMatchObject({ dependency: 'anthropic', deadline: run.deadline, runClass: run.class, tokens: { outputTokens: 512 } });
    expect(p.booked[0]!.tokens.inputTokens).toBeGreaterThan(10);
    // cache reads do not count in the input limit; cache writes do
    expect(p.settled[0]).toEqual({ dependency: 'anthropic', booked: p.booked[0]!.tokens, used: { inputTokens: 46, outputTokens: 9 } });
    expect(p.learned[0]).toMatchObject({ dependency: 'anthropic', response: { status: 200 } });
    expect(p.learned[0]!.response.headers).toBeTypeOf('function');
  });

  it('waits in the processor for a turn that comes soon, then calls', async () => {
    const p = pacer([{ kind: 'go', waitMs: 40 }]);
    let calledAfter = -1;
    const started = Date.now();
    const { exec } = executor([], toolDone(), [], undefined, {
      deps: {
        pacer: p.fake,
        llm: async () => {
          if (calledAfter < 0) calledAfter = Date.now() - started;
          return { text: 'ok', content: [{ type: 'text', text: 'ok' }], model: 'sim', stopReason: 'end_turn', answerBytes: 2, usage: { inputTokens: 1, outputTokens: 1, cacheReadTokens: 0, cacheCreationTokens: 0 } };
        },
      },
    });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(calledAfter).toBeGreaterThanOrEqual(35);
  });

  it('makes no call whose turn is further away, and re-enqueues the run for it without counting a failure', async () => {
    const p = pacer([{ kind: 'defer', until: NOW + 5_000 }]);
    const { exec, llmCalls, published, retries, recorded, metrics } = executor([], new Map(), [], undefined, { deps: { pacer: p.fake } });
    expect(await exec.execute(run, ATTEMPT)).toBe('retried');
    expect(llmCalls()).toBe(0);
    expect(retries[0]!.run).toMatchObject({ attempt: 2, dueAt: NOW + 5_000 });
    expect(retries[0]!.headers['sluice-retry-failures']).toBe('0');
    expect(published.at(-1)!.message).toMatch(/^waiting for rate limit on anthropic; attempt 2 at 2026-01-01T12:00:05.000Z$/);
    expect(await metrics.registry.getSingleMetricAsString('sluice_run_retries_total')).toContain('sluice_run_retries_total{reason="rate_limited"} 1');
    // not a breaker refusal; the breaker is told the call was released, not that it failed
    expect(await metricValue(metrics.breakerRefusals, { dependency: 'anthropic' })).toBe(0);
    expect(recorded).toEqual([{ dependency: 'anthropic', token: undefined, outcome: 'released' }]);
    expect(p.settled).toHaveLength(0);
  });

  it('takes the dependency permit before the turn, so a turn is not spent waiting for a permit, and gives it back when the turn is deferred', async () => {
    const order: string[] = [];
    const p = pacer([{ kind: 'defer', until: NOW + 5_000 }]);
    const booking = p.fake.book;
    const dependencyPermits = {
      acquire: async () => {
        order.push('permit');
        return async () => void order.push('release');
      },
    };
    const paced = { ...p.fake, book: (...args: Parameters<CallPacer['book']>) => (order.push('turn'), booking(...args)) };
    const { exec } = executor([], new Map(), [], undefined, { deps: { pacer: paced, dependencyPermits } });
    expect(await exec.execute(run, ATTEMPT)).toBe('retried');
    expect(order).toEqual(['permit', 'turn', 'release']);
  });

  it('spreads deferred runs over the wait, never past the deadline', async () => {
    const p = pacer([{ kind: 'defer', until: NOW + 1_000 }]);
    const { exec, retries } = executor([], new Map(), [], undefined, { deps: { pacer: p.fake, random: () => 0.5 } });
    expect(await exec.execute(run, ATTEMPT)).toBe('retried');
    expect(retries[0]!.run.dueAt).toBe(NOW + 1_500);
  });

  it('a run that cannot have its turn before its deadline gets its fallback, with no call made', async () => {
    const p = pacer([{ kind: 'defer', until: run.deadline + 1_000 }]);
    const { exec, llmCalls, published, retries } = executor([], new Map(), [], undefined, { deps: { pacer: p.fake } });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(llmCalls()).toBe(0);
    expect(retries).toHaveLength(0);
    const result = JSON.parse(published.at(-1)!.result!);
    expect(result).toMatchObject({ degraded: true, unavailable: [{ dependency: 'anthropic' }] });
    expect(result.unavailable[0].reason).toMatch(/rate limit has no turn before .*, after this run's deadline/);
    const failing = executor([], new Map(), [], undefined, { deps: { pacer: pacer([{ kind: 'defer', until: run.deadline + 1_000 }]).fake } });
    expect(await failing.exec.execute(tenantC, ATTEMPT)).toBe('failed');
    expect(failing.published.at(-1)!.error).toMatchObject({ code: 'dependency_unavailable' });
  });

  it('a batch run waits for its turn as for a breaker: due at its deadline at the latest', async () => {
    const p = pacer([{ kind: 'defer', until: run.deadline + 60_000 }]);
    const { exec, retries } = executor([], new Map(), [], undefined, { deps: { pacer: p.fake } });
    expect(await exec.execute({ ...run, class: 'batch' }, ATTEMPT)).toBe('retried');
    expect(retries[0]!.run.dueAt).toBe(run.deadline);
  });

  it('names the pacing (Redis) when booking fails, so the attempt is repeated, and makes no call', async () => {
    const p = pacer([new Error('Connection is closed.')]);
    const { exec, llmCalls, deadLetters } = executor([], new Map(), [], undefined, { deps: { pacer: p.fake } });
    const err = await exec.execute(run, ATTEMPT).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(InfrastructureError);
    expect(err).toMatchObject({ operation: 'pacing', message: "booking a call's turn under the rate limits for anthropic (Redis) failed: Connection is closed." });
    expect(llmCalls()).toBe(0);
    expect(deadLetters).toHaveLength(0);
  });

  it('does not fail a run whose call went out when the pacer cannot be told how it went', async () => {
    const p = pacer([], { settle: new Error('Connection is closed.') });
    const { exec } = executor([], toolDone(), [], undefined, { deps: { pacer: p.fake } });
    expect(await exec.execute(run, ATTEMPT)).toBe('completed');
    expect(p.settled).toHaveLength(2);
  });

  it('tells the pacer what a failed call\'s response said (a 429 and its retry-after), keeping the booking', async () => {
    const p = pacer();
    const limited = Anthropic.APIError.generate(429, { type: 'error', error: { type: 'rate_limit_error', message: 'slow down' } }, 'slow down', new Headers({ 'retry-after': '3', 'anthropic-ratelimit-requests-limit': '50' }));
    const { exec } = executor([], toolDone(), [limited], undefined, { deps: { pacer: p.fake } });
    expect(await exec.execute(run, ATTEMPT)).toBe('retried');
    expect(p.learned[0]).toMatchObject({ dependency: 'anthropic', response: { status: 429, retryAfterSec: 3 } });
    expect(p.learned[0]!.response.headers?.('anthropic-ratelimit-requests-limit')).toBe('50');
    // the failed call settles nothing (a 429 timed by retry-after goes to the retry topic)
    expect(p.booked).toHaveLength(1);
    expect(p.settled).toHaveLength(0);
  });
});

describe('RunExecutor with an agent step', () => {
  const agentRun: RunRequested = { ...run, workflow: 'support-agent', input: '{"message":"Where is order A-1?"}' };
  const usage = { inputTokens: 100, outputTokens: 20, cacheReadTokens: 0, cacheCreationTokens: 0 };
  const answer = (text: string): LlmResult => ({ text, content: [{ type: 'text', text }], model: 'claude-sonnet-4-6', stopReason: 'end_turn', answerBytes: Buffer.byteLength(text), usage });
  const asks = (...uses: { id: string; name: string; input: Record<string, unknown> }[]): LlmResult => ({ text: '', content: uses.map((u) => ({ type: 'tool_use' as const, ...u })), model: 'claude-sonnet-4-6', stopReason: 'tool_use', answerBytes: uses.reduce((bytes, u) => bytes + JSON.stringify(u.input).length, 0), usage });
  /** An LLM that plays `turns` in order, keeping the requests it got. */
  const scripted = (turns: LlmResult[]) => {
    const requests: Parameters<RunExecutorDeps['llm']>[0][] = [];
    const llm: RunExecutorDeps['llm'] = async (req) => {
      requests.push(req);
      const next = turns.shift();
      if (!next) throw new Error('the test scripted no more model turns');
      return next;
    };
    return { llm, requests };
  };

  /** The simulator's tool paths, answered in-process: each request's path and Idempotency-Key. */
  let tools: { path: string; key: string | undefined; body: unknown }[] = [];
  let simulatorUrl = '';
  let server: Server;
  beforeAll(async () => {
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        tools.push({ path: req.url ?? '', key: req.headers['idempotency-key'] as string | undefined, body: JSON.parse(body) });
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ found: req.url }));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    simulatorUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => {
    toolConnections.close();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  beforeEach(() => void (tools = []));

  it('completes with the answer, the step\'s agent summary and the usage of every turn', async () => {
    const { llm, requests } = scripted([asks({ id: 'toolu_1', name: 'order-lookup', input: { orderId: 'A-1' } }, { id: 'toolu_2', name: 'kb-search', input: { query: 'late' } }), answer('It shipped.')]);
    const journal = new Map<string, unknown>();
    const { exec, published, deadLetters } = executor([], journal, [], undefined, { deps: { llm, simulatorUrl } });
    expect(await exec.execute(agentRun, ATTEMPT)).toBe('completed');
    expect(requests).toHaveLength(2);
    expect(requests[0]!.tools!.map((t) => t.name)).toEqual(['order-lookup', 'kb-search']);
    expect(tools.map((t) => [t.path, t.key]).sort()).toEqual([
      ['/tools/kb-search', `${run.runId}:agent:turn-1:toolu_2`],
      ['/tools/order-lookup', `${run.runId}:agent:turn-1:toolu_1`],
    ]);
    const result = JSON.parse(published.at(-1)!.result!);
    expect(result).toMatchObject({ text: 'It shipped.', degraded: false, steps: [{ id: 'agent', output: { text: 'It shipped.', agent: { turns: 2, toolCalls: 2, toolErrors: 0, tokens: 240, unavailable: [] } } }] });
    expect(result.steps[0].output.agent.transcript).toHaveLength(2);
    expect(result.usage).toMatchObject({ inputTokens: 200, outputTokens: 40, llmCalls: 2, byModel: { 'claude-sonnet-4-6': { llmCalls: 2 } } });
    // The turns' progress is numbered within the step's block, before the outcome.
    const slots = slotsPerStep(loadConfig({ env: {} }).workflows['support-agent']!.steps);
    expect(published.filter((e) => e.status === 'running').map((e) => e.sequence)).toEqual([0, 1, 2].map((progress) => stepSequence(1, 0, { progress, slots })));
    expect([...journal.keys()].sort()).toEqual(['agent', 'agent#turn-1', 'agent#turn-1#toolu_1', 'agent#turn-1#toolu_2', 'agent#turn-2']);
    expect(deadLetters).toHaveLength(0);
  });

  it('fails a run stopped by a bound with agent_bound_reached, keeping the transcript so far as its result, and dead-letters it', async () => {
    const { llm } = scripted(Array.from({ length: 10 }, (_, i) => asks({ id: `toolu_${i}`, name: 'no-such-tool', input: {} })));
    const { exec, published, deadLetters } = executor([], new Map(), [], undefined, { deps: { llm, simulatorUrl } });
    expect(await exec.execute(agentRun, ATTEMPT)).toBe('failed');
    const failed = published.at(-1)!;
    expect(failed).toMatchObject({ status: 'failed', step: 'agent', error: { code: 'agent_bound_reached', retryable: false } });
    expect(failed.message).toMatch(/^failed: step 1\/1 \(agent\) — the model still asked for tools \(no-such-tool\) at turn 6, the last of 6 \(agent bound maxTurns\); the transcript so far is in the result$/);
    const result = JSON.parse(failed.result!);
    expect(result).toMatchObject({ text: null, degraded: false, stoppedBy: 'maxTurns', steps: [{ id: 'agent', output: { text: null, agent: { stoppedBy: 'maxTurns', turns: 6, toolCalls: 5, toolErrors: 5 } } }] });
    expect(result.steps[0].output.agent.transcript).toHaveLength(6);
    expect(result.usage).toMatchObject({ llmCalls: 6, inputTokens: 600 });
    expect(tools).toHaveLength(0);
    expect(deadLetters).toHaveLength(1);
    expect(deadLetters[0]!.headers['sluice-dlt-reason']).toBe('non_retryable');
    expect(deadLetters[0]!.envelope).toMatchObject({ errorClass: 'agent_bound_reached' });
  });

  it('fails a bound-stopped run without its transcript when the transcript would not fit in a status event', async () => {
    const { llm } = scripted(Array.from({ length: 10 }, (_, i) => asks({ id: `toolu_${i}`, name: 'no-such-tool', input: {} })));
    const config = loadConfig({ env: {} });
    // Above the six journaled turns (about 1,400 bytes), below the result with their transcript (about 1,750).
    config.processor.maxResultBytes = 1_600;
    const { exec, published } = executor([], new Map(), [], config, { deps: { llm, simulatorUrl } });
    expect(await exec.execute(agentRun, ATTEMPT)).toBe('failed');
    expect(published.at(-1)).toMatchObject({ status: 'failed', error: { code: 'agent_bound_reached' }, result: null });
  });

  it('fails the run with output_too_large when a model turn passes maxStepOutputBytes, journaling nothing of it', async () => {
    const { llm } = scripted([answer('z'.repeat(3_000))]);
    const config = loadConfig({ env: {} });
    config.processor.maxStepOutputBytes = 2_048;
    const journal = new Map<string, unknown>();
    const { exec, published, deadLetters } = executor([], journal, [], config, { deps: { llm, simulatorUrl } });
    expect(await exec.execute(agentRun, ATTEMPT)).toBe('failed');
    expect(journal.size).toBe(0);
    expect(published.at(-1)).toMatchObject({ status: 'failed', step: 'agent', result: null, error: { code: 'output_too_large', retryable: false, message: expect.stringMatching(/^step 1\/1 \(agent\): turn 1's answer is \d+ bytes, over the bound of 2048 \(processor\.maxStepOutputBytes\)$/) } });
    expect(deadLetters[0]!.headers['sluice-dlt-reason']).toBe('non_retryable');
  });

  it('completes degraded when a tool is unavailable to a degrade tenant: the model read an is_error result', async () => {
    const { llm, requests } = scripted([asks({ id: 'toolu_1', name: 'kb-search', input: { query: 'late' } }), answer('The knowledge base is unavailable.')]);
    const { exec, published } = executor([], new Map(), [], undefined, { breaker: { name: 'kb-search', state: 'open', retryAt: run.deadline + 1_000 }, deps: { llm, simulatorUrl } });
    expect(await exec.execute(agentRun, ATTEMPT)).toBe('completed');
    expect(tools).toHaveLength(0);
    expect(JSON.stringify(requests[1]!.messages[2])).toContain('"is_error":true');
    expect(JSON.parse(published.at(-1)!.result!)).toMatchObject({ degraded: true, text: 'The knowledge base is unavailable.', unavailable: [{ dependency: 'kb-search' }] });
  });

  it('stays degraded on redelivery when the journal already holds the agent step\'s output', async () => {
    const output = { text: 'The knowledge base is unavailable.', agent: { turns: 2, toolCalls: 1, toolErrors: 1, tokens: 240, calls: [], transcript: [], unavailable: [{ dependency: 'kb-search', reason: 'kb-search is unavailable (breaker open)' }] } };
    const { exec, published, llmCalls } = executor([], new Map([['agent', output]]), [], undefined, { deps: { simulatorUrl } });
    expect(await exec.execute(agentRun, ATTEMPT)).toBe('completed');
    expect(llmCalls()).toBe(0);
    expect(JSON.parse(published.at(-1)!.result!)).toMatchObject({ degraded: true, text: 'The knowledge base is unavailable.', unavailable: [{ dependency: 'kb-search' }] });
  });

  it('fails a fail tenant\'s run when a tool is unavailable', async () => {
    const { llm } = scripted([asks({ id: 'toolu_1', name: 'kb-search', input: { query: 'late' } })]);
    const { exec, published } = executor([], new Map(), [], undefined, { breaker: { name: 'kb-search', state: 'open', retryAt: run.deadline + 1_000 }, deps: { llm, simulatorUrl } });
    expect(await exec.execute({ ...agentRun, tenantId: 'tenant-c' }, ATTEMPT)).toBe('failed');
    expect(published.at(-1)).toMatchObject({ status: 'failed', step: 'agent', error: { code: 'dependency_unavailable' } });
  });

  it('is cancelled when the journal answers a cancellation as a turn is recorded', async () => {
    const { llm } = scripted([asks({ id: 'toolu_1', name: 'kb-search', input: { query: 'late' } })]);
    const { exec, published } = executor([undefined, 'requested'], new Map(), [], undefined, { deps: { llm, simulatorUrl } });
    expect(await exec.execute(agentRun, ATTEMPT)).toBe('cancelled');
    expect(published.at(-1)!.message).toBe("cancelled: stopped at the caller's request during step 1/1 (agent)");
    expect(tools).toHaveLength(0);
  });
});

describe('RunExecutor goodput', () => {
  const overloaded = () => Anthropic.APIError.generate(529, { type: 'error', error: { type: 'overloaded_error', message: 'busy' } }, 'overloaded', new Headers());
  const badRequest = () => Anthropic.APIError.generate(400, { type: 'error', error: { type: 'invalid_request_error', message: 'no' } }, 'bad', new Headers());
  const labels = { tenant: run.tenantId, workflow: run.workflow, class: run.class };
  const wasted = (metrics: ReturnType<typeof createMetrics>, reason: string) => metricValue(metrics.providerCallsWasted, { dependency: 'anthropic', reason });
  // The tool step is answered by the journal: these tests count LLM calls.
  const toolDone = () => new Map<string, unknown>([['lookup-order', { orderId: '42' }]]);

  it('counts a run completed by its deadline on time once, not again when its record is delivered again', async () => {
    const runCalls = new MemoryRunCalls();
    const journal = toolDone();
    const first = executor([], journal, [], loadConfig({ env: {} }), { runCalls });
    expect(await first.exec.execute(run, ATTEMPT)).toBe('completed');
    const again = executor([], journal, [], loadConfig({ env: {} }), { runCalls });
    expect(await again.exec.execute(run, ATTEMPT)).toBe('completed');
    expect(await metricValue(first.metrics.runsOnTime, labels)).toBe(1);
    expect(await metricValue(again.metrics.runsOnTime, labels)).toBe(0);
    expect(await wasted(first.metrics, 'failed')).toBe(0);
  });

  it('counts both LLM calls of a run that fails at its second as wasted, the first answered one too', async () => {
    let answered = 0;
    const { exec, metrics, llmCalls } = executor([], toolDone(), [], loadConfig({ env: {} }), {
      deps: {
        llm: async () => {
          if (++answered === 2) throw toStepError('anthropic', badRequest());
          return { text: 'ok', content: [{ type: 'text', text: 'ok' }], model: 'sim', stopReason: 'end_turn', answerBytes: 2, usage: { inputTokens: 1, outputTokens: 1, cacheReadTokens: 0, cacheCreationTokens: 0 } };
        },
      },
    });
    expect(await exec.execute(run, ATTEMPT)).toBe('failed');
    expect(answered).toBe(2);
    expect(llmCalls()).toBe(0);
    expect(await wasted(metrics, 'failed')).toBe(2);
    expect(await metricValue(metrics.runsOnTime, labels)).toBe(0);
  });

  it("adds a retried attempt's calls to the run's: the attempt that ends it counts them all", async () => {
    const runCalls = new MemoryRunCalls();
    const first = executor([], toolDone(), [overloaded(), overloaded()], loadConfig({ env: {} }), { runCalls });
    expect(await first.exec.execute(run, ATTEMPT)).toBe('retried');
    expect(await wasted(first.metrics, 'failed')).toBe(0);
    const second = executor([], toolDone(), [badRequest()], loadConfig({ env: {} }), { runCalls });
    expect(await second.exec.execute(first.retries[0]!.run, { ...ATTEMPT, priorFailures: 1 })).toBe('failed');
    expect(await wasted(second.metrics, 'failed')).toBe(3);
  });

  it('counts a stand-in answer as degraded, not on time, and its calls as wasted', async () => {
    const { exec, metrics } = executor([], new Map(), [overloaded(), overloaded()], loadConfig({ env: {} }));
    expect(await exec.execute(run, lastAttempt)).toBe('completed');
    expect(await metricValue(metrics.runsDegraded, labels)).toBe(1);
    expect(await metricValue(metrics.runsOnTime, labels)).toBe(0);
    expect(await wasted(metrics, 'degraded')).toBe(2);
  });

  it("counts the calls of an attempt the deadline ended mid-way as wasted, expired", async () => {
    let now = NOW;
    const { exec, metrics } = executor([], new Map(), [], loadConfig({ env: {} }), {
      deps: {
        now: () => now,
        llm: async () => {
          now = run.deadline + 1;
          return { text: 'ok', content: [{ type: 'text', text: 'ok' }], model: 'sim', stopReason: 'end_turn', answerBytes: 2, usage: { inputTokens: 1, outputTokens: 1, cacheReadTokens: 0, cacheCreationTokens: 0 } };
        },
      },
    });
    expect(await exec.execute(run, ATTEMPT)).toBe('expired');
    expect(await wasted(metrics, 'expired')).toBe(1);
  });

  it('counts the calls of a run dead-lettered after its attempts failed on the infrastructure', async () => {
    let permits = 0;
    // The first call gets its permit and a 529; the permit for its retry cannot be taken.
    const dependencyPermits = { acquire: async () => { if (permits++ > 0) throw new Error('Redis is down'); return async () => undefined; } };
    const { exec, metrics } = executor([], new Map(), [overloaded()], loadConfig({ env: {} }), { deps: { dependencyPermits } });
    await expect(exec.execute(run, ATTEMPT)).rejects.toBeInstanceOf(InfrastructureError);
    await exec.deadLetter(run, ATTEMPT, { reason: 'infrastructure_error', code: 'infrastructure_error', message: 'gave up', retryable: true });
    expect(await wasted(metrics, 'dead_lettered')).toBe(1);
  });
});
