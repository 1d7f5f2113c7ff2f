import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readStatusStream } from '../support/sse.js';
import { startDrillStack, type DrillStack } from '../support/drill-stack.js';
import { ADMIN_KEY, TENANT_A_KEY, TENANT_C_KEY, eventually, http, waitForStatus, type SluiceProcess } from './harness.js';

/**
 * Agent steps end to end on Kafka, Redis and Postgres, with the provider simulator playing the
 * model (a scripted agent driven by the `[sim-agent …]` line of the system prompt). The processor
 * runs in its own process so it can be killed mid-loop while the rest keeps the evidence.
 */
describe('agent runs', () => {
  let stack: DrillStack;
  let api: string;
  let sim: string;
  let processor: SluiceProcess;

  const setFaults = (target: string, profile: Record<string, unknown>) => http(`${sim}/admin/faults`, { method: 'PUT', key: ADMIN_KEY, json: { target, ...profile } });
  const resetSim = async () => {
    await http(`${sim}/admin/faults`, { method: 'DELETE', key: ADMIN_KEY });
    await http(`${sim}/admin/stats/reset`, { method: 'POST', key: ADMIN_KEY });
  };
  const stats = async () => (await http(`${sim}/admin/stats`, { key: ADMIN_KEY })).body;
  const submit = async (workflow: string, key = TENANT_A_KEY, input: unknown = { message: 'where is my order A-1001?' }) => {
    const res = await http(`${api}/v1/runs`, { method: 'POST', key, json: { workflow, input, deadlineMs: 60_000 } });
    expect(res.status, JSON.stringify(res.body)).toBe(202);
    return res.body.runId as string;
  };
  const agentStep = (system: string, bounds: Record<string, unknown> = {}, tools = ['order-lookup', 'kb-search']) => ({ steps: [{ id: 'agent', kind: 'agent', tools, system, bounds }] });

  beforeAll(async () => {
    stack = await startDrillStack({
      label: 'agent',
      splitProcessor: true,
      overrides: {
        simulator: { anthropicLatencyMs: 0, anthropicJitterMs: 0 },
        dependencies: {
          // One lookup at a time across the cluster: the cap must hold while agents fan out.
          'order-lookup': { maxConcurrency: 1 },
          // Its own tool, so the other tests' successes are not in its breaker's window: one failure opens it.
          'flaky-search': {
            kind: 'tool',
            url: '/tools/flaky-search',
            inputSchema: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
            timeouts: { connectMs: 1_000, readMs: 4_000, totalMs: 5_000 },
            maxConcurrency: 8,
            retry: { maxAttempts: 1 },
            breaker: { minimumCalls: 1, failureRateThreshold: 0.5, openMs: 60_000, windowMs: 60_000 },
          },
        },
        workflows: {
          'fan-out-agent': agentStep('Answer with the tools. [sim-agent tool-turns=2 parallel=2]'),
          'looping-agent': agentStep('Never stop. [sim-agent tool-turns=1000 parallel=1]', { maxTurns: 3 }),
          'fragile-agent': agentStep('Answer with the tools. [sim-agent tool-turns=2 parallel=2]', {}, ['order-lookup', 'flaky-search']),
        },
      },
    });
    api = stack.api;
    sim = stack.sim;
    processor = stack.processor!;
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
  });

  it('completes a 3-turn agent whose two tool calls per turn overlap, under the tools\' caps', async () => {
    await resetSim();
    // Slow tools make the overlap of a turn's two calls visible in the simulator's peak concurrency.
    for (const tool of ['order-lookup', 'kb-search']) expect((await setFaults(tool, { latencyMs: 400, jitterMs: 0 })).status).toBe(200);
    const runIds = await Promise.all([submit('fan-out-agent'), submit('fan-out-agent'), submit('fan-out-agent')]);
    const done = await Promise.all(runIds.map((id) => waitForStatus(api, id, TENANT_A_KEY, ['completed', 'failed', 'expired'], 60_000)));

    for (const run of done) {
      expect(run.status, JSON.stringify(run.error)).toBe('completed');
      const agent = run.result.steps[0].output.agent;
      expect(agent).toMatchObject({ turns: 3, toolCalls: 4, toolErrors: 0 });
      expect(agent.transcript.map((t: { tools: { name: string }[] }) => t.tools.map((c) => c.name))).toEqual([['order-lookup', 'kb-search'], ['order-lookup', 'kb-search'], []]);
      expect(run.result.text).toContain('4 tool results');
      expect(run.result.usage.llmCalls).toBe(3);
    }
    const s = await stats();
    expect(s.calls.anthropic).toBe(9);
    expect(s.sideEffects).toMatchObject({ 'order-lookup': 6, 'kb-search': 6 });
    // The two calls of a turn ran at once (total peak above one), and the lookup's cap of 1 held across the three runs.
    expect(s.maxConcurrent.total).toBeGreaterThanOrEqual(2);
    expect(s.maxConcurrent.byTarget['order-lookup']).toBe(1);

    const stream = await readStatusStream(`${api}/v1/runs/${runIds[0]}/events`, { key: TENANT_A_KEY, timeoutMs: 10_000 });
    const messages = stream.events.map((e) => e.message);
    expect(messages).toContain('running: step 1/1 (agent) turn 1, calling order-lookup and kb-search in parallel');
    expect(messages).toContain('running: step 1/1 (agent) turn 3, asking the model with 2 tool results');
    const sequences = stream.events.map((e) => e.sequence);
    expect(sequences).toEqual([...sequences].sort((a, b) => a - b));
  }, 90_000);

  it('resumes a loop whose processor was killed mid-turn, making each tool call once', async () => {
    await resetSim();
    for (const tool of ['order-lookup', 'kb-search']) await setFaults(tool, { latencyMs: 2_500, jitterMs: 0 });
    const runId = await submit('fan-out-agent');
    // Killed while turn 2's tools are in flight: turn 1 and its two results are journaled.
    await readStatusStream(`${api}/v1/runs/${runId}/events`, { key: TENANT_A_KEY, timeoutMs: 30_000, stopWhen: (events) => events.some((e) => /turn 2, calling/.test(e.message ?? '')) });
    await processor.kill9();
    for (const tool of ['order-lookup', 'kb-search']) await setFaults(tool, { latencyMs: 50, jitterMs: 0 });
    processor = await stack.startProcessor();

    const done = await waitForStatus(api, runId, TENANT_A_KEY, ['completed', 'failed', 'expired'], 60_000);
    expect(done.status, JSON.stringify(done.error)).toBe('completed');
    expect(done.result.steps[0].output.agent).toMatchObject({ turns: 3, toolCalls: 4 });
    const s = await eventually(async () => {
      const body = await stats();
      return body.sideEffects?.['order-lookup'] >= 2 && body.sideEffects?.['kb-search'] >= 2 ? body : undefined;
    }, 5_000, 'both tools called in both turns');
    // Turn 1's results came from the journal; turn 2's calls, cut off by the kill, were repeated under the same Idempotency-Keys.
    expect(s.sideEffects).toMatchObject({ 'order-lookup': 2, 'kb-search': 2 });
    // Turns 1 and 2 were journaled before the kill: only turn 3 was asked after the restart.
    expect(s.calls.anthropic).toBe(3);
  }, 120_000);

  it('ends a model that never stops at its turn bound, keeping the transcript so far', async () => {
    await resetSim();
    const runId = await submit('looping-agent');
    const done = await waitForStatus(api, runId, TENANT_A_KEY, ['completed', 'failed', 'dead_lettered', 'expired'], 60_000);
    expect(done.status).toMatch(/^(failed|dead_lettered)$/);
    expect(done.error).toMatchObject({ code: 'agent_bound_reached', retryable: false });
    expect(done.error.message).toContain('agent bound maxTurns');
    expect(done.result.stoppedBy).toBe('maxTurns');
    expect(done.result.steps[0].output.agent).toMatchObject({ turns: 3, toolCalls: 2, stoppedBy: 'maxTurns' });
    expect(done.result.steps[0].output.agent.transcript).toHaveLength(3);
    expect((await stats()).calls.anthropic).toBe(3);
  }, 60_000);
  it('applies the tenant\'s fallback when a tool\'s breaker opens: degrade reads an error, fail fails the run', async () => {
    await resetSim();
    // Turn 1's flaky-search calls fail (an is_error result each) and open its breaker; turn 2 meets it
    // open. They fail late, so both runs have started by then: a run that needs an open dependency
    // waits for it before starting, and would only expire.
    await setFaults('flaky-search', { errorRate: 1, errorStatus: 500, latencyMs: 500 });
    const [degradeRun, failRun] = await Promise.all([submit('fragile-agent', TENANT_A_KEY), submit('fragile-agent', TENANT_C_KEY)]);
    const degraded = await waitForStatus(api, degradeRun, TENANT_A_KEY, ['completed', 'failed', 'expired'], 60_000);
    // A failed run is archived in the DLQ, then reads as dead_lettered.
    const failed = await waitForStatus(api, failRun, TENANT_C_KEY, ['completed', 'failed', 'dead_lettered', 'expired'], 60_000);

    expect(degraded.status, JSON.stringify(degraded.error)).toBe('completed');
    expect(degraded.result.degraded, JSON.stringify(degraded.result)).toBe(true);
    expect(degraded.result.unavailable.map((u: { dependency: string }) => u.dependency)).toContain('flaky-search');
    expect(degraded.result.steps[0].output.agent.toolErrors).toBeGreaterThanOrEqual(2);
    expect(failed.status).toMatch(/^(failed|dead_lettered)$/);
    expect(failed.error.code).toBe('dependency_unavailable');
    await http(`${sim}/admin/faults`, { method: 'DELETE', key: ADMIN_KEY });
  }, 90_000);

});
