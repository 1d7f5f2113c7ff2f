import type Anthropic from '@anthropic-ai/sdk';
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

/** An executor whose LLM answers at once and whose tools must never be called. */
function executor(cancelAnswers: boolean[]) {
  const published: RunStatusChanged[] = [];
  let llmCalls = 0;
  let checks = 0;
  const anthropic = {
    messages: {
      create: async () => {
        llmCalls++;
        return { content: [{ type: 'text', text: 'ok' }], model: 'sim', stop_reason: 'end_turn', usage: { input_tokens: 1, output_tokens: 1 } };
      },
    },
  } as unknown as Anthropic;
  const exec = new RunExecutor({
    config: loadConfig({ env: {} }),
    anthropic,
    simulatorUrl: 'http://127.0.0.1:1',
    publishStatus: async (e) => void published.push(e),
    cancellation: { isCancelRequested: async () => cancelAnswers[checks++] ?? false },
    dependencyPermits: { acquire: async () => async () => undefined },
    metrics: createMetrics(),
    logger: createLogger('silent'),
    now: () => NOW,
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
