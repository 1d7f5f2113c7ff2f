import Anthropic from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import type { RunRequested, RunStatusChanged } from '../../../src/events/schemas.js';
import { createLogger } from '../../../src/obs/logger.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { RunExecutor } from '../../../src/processors/run-executor.js';
import { terminalSequence } from '../../../src/runs/status-sequence.js';

const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);
const run: RunRequested = {
  runId: '0190f5a2-7c00-7abc-8def-0123456789ab',
  tenantId: 'tenant-a',
  workflow: 'support-reply',
  class: 'interactive',
  admittedAt: NOW - 1_000,
  deadline: NOW + 30_000,
  attempt: 1,
  traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
  input: '{"orderId":"42"}',
  idempotencyKey: null,
  dueAt: null,
};

/** An executor whose LLM answers at once (or fails as `llmFailures` says) and whose tools must never be called. */
function executor(cancelAnswers: boolean[], journal: Map<string, unknown> = new Map(), llmFailures: Error[] = [], config = loadConfig({ env: {} })) {
  const published: RunStatusChanged[] = [];
  let llmCalls = 0;
  let checks = 0;
  const anthropic = {
    messages: {
      create: async () => {
        llmCalls++;
        const failure = llmFailures.shift();
        if (failure) throw failure;
        return { content: [{ type: 'text', text: 'ok' }], model: 'sim', stop_reason: 'end_turn', usage: { input_tokens: 1, output_tokens: 1 } };
      },
    },
  } as unknown as Anthropic;
  const exec = new RunExecutor({
    config,
    anthropic,
    simulatorUrl: 'http://127.0.0.1:1',
    publishStatus: async (e) => void published.push(e),
    cancellation: { isCancelRequested: async () => cancelAnswers[checks++] ?? false },
    dependencyPermits: { acquire: async () => async () => undefined },
    journal: {
      recall: async (_runId: string, stepId: string) => (journal.has(stepId) ? { output: journal.get(stepId) } : undefined),
      record: async (_runId: string, stepId: string, output: unknown) => void journal.set(stepId, output),
    },
    metrics: createMetrics(),
    logger: createLogger('silent'),
    now: () => NOW,
    random: () => 0,
  });
  return { exec, published, llmCalls: () => llmCalls, checks: () => checks };
}

describe('RunExecutor cancellation', () => {
  it('never starts a run cancelled while queued', async () => {
    const { exec, published, llmCalls } = executor([true]);
    expect(await exec.execute(run)).toBe('cancelled');
    expect(llmCalls()).toBe(0);
    expect(published).toHaveLength(1);
    expect(published[0]).toMatchObject({ status: 'cancelled', sequence: terminalSequence(1), error: null, result: null, step: null });
    expect(published[0]!.message).toMatch(/^cancelled: .*before it started$/);
  });

  it('stops at the next step boundary, before the tool call', async () => {
    const { exec, published, llmCalls, checks } = executor([false, true]);
    expect(await exec.execute(run)).toBe('cancelled');
    expect(llmCalls()).toBe(1);
    expect(checks()).toBe(2);
    expect(published.map((e) => e.status)).toEqual(['running', 'cancelled']);
    expect(published[1]!.message).toContain('at the step boundary before step 2/3 (lookup-order)');
    expect(published[1]!.error).toBeNull();
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
    expect(await exec.execute(run)).toBe('completed');
    expect(llmCalls()).toBe(0);
    expect(JSON.parse(published.at(-1)!.result!)).toMatchObject({ text: 'It shipped.' });
  });

  it('records each completed step, so the next delivery can skip it', async () => {
    const journal = new Map<string, unknown>([['lookup-order', { orderId: '42' }]]);
    const { exec, llmCalls } = executor([], journal);
    expect(await exec.execute(run)).toBe('completed');
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
    expect(await exec.execute(run)).toBe('completed');
    expect(llmCalls()).toBe(2);
  });

  it('gives up after the policy\'s attempts and fails the run as retryable', async () => {
    const { exec, llmCalls, published } = executor([], laterSteps(), [overloaded(), overloaded(), overloaded()]);
    expect(await exec.execute(run)).toBe('failed');
    expect(llmCalls()).toBe(2);
    expect(published.at(-1)!.error).toMatchObject({ code: 'dependency_error', retryable: true });
  });

  it('never retries a 400', async () => {
    const { exec, llmCalls } = executor([], laterSteps(), [badRequest()]);
    expect(await exec.execute(run)).toBe('failed');
    expect(llmCalls()).toBe(1);
  });

  it('does not retry once the dependency\'s retry budget is spent', async () => {
    const config = loadConfig({ env: {} });
    config.dependencies.anthropic!.retry.budgetMinRetries = 0;
    const { exec, llmCalls } = executor([], laterSteps(), [overloaded()], config);
    expect(await exec.execute(run)).toBe('failed');
    expect(llmCalls()).toBe(1); // one call in the window: 10% of it is not a whole retry
  });
});
