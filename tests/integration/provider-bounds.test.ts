import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDrillStack, type DrillStack } from '../support/drill-stack.js';
import { ADMIN_KEY, TENANT_A_KEY, eventually, http, waitForStatus } from './harness.js';

/**
 * What a provider that breaks its word can make Sluice hold or charge, end to end on Kafka, Redis
 * and Postgres: the simulator answers far past `max_tokens` (`answerBytes`), under-reports its
 * usage (`reportedOutputTokens`), or as a model reusing tool_use ids across turns (`repeat-ids`).
 */
describe('a provider that breaks its word', () => {
  let stack: DrillStack;
  let api: string;
  let sim: string;

  const setFaults = async (target: string, profile: Record<string, unknown>) => expect((await http(`${sim}/admin/faults`, { method: 'PUT', key: ADMIN_KEY, json: { target, ...profile } })).status).toBe(200);
  const resetSim = async () => {
    await http(`${sim}/admin/faults`, { method: 'DELETE', key: ADMIN_KEY });
    await http(`${sim}/admin/stats/reset`, { method: 'POST', key: ADMIN_KEY });
  };
  const stats = async () => (await http(`${sim}/admin/stats`, { key: ADMIN_KEY })).body;
  const run = async (workflow: string) => {
    const res = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow, input: { message: 'where is my order A-1000?' }, deadlineMs: 60_000 } });
    expect(res.status, JSON.stringify(res.body)).toBe(202);
    return waitForStatus(api, res.body.runId, TENANT_A_KEY, ['completed', 'failed', 'dead_lettered', 'expired'], 45_000);
  };

  beforeAll(async () => {
    stack = await startDrillStack({
      label: 'provider-bounds',
      overrides: {
        simulator: { anthropicLatencyMs: 0, anthropicJitterMs: 0 },
        workflows: {
          'one-answer': { steps: [{ id: 'answer', kind: 'llm', system: 'Answer briefly.' }] },
          // maxTokens 20,000 allows answers of 336,384 bytes, more than a step output's 262,144.
          'verbose-agent': { steps: [{ id: 'agent', kind: 'agent', tools: ['order-lookup'], maxTokens: 20_000, system: 'Answer with the tools. [sim-agent tool-turns=1 parallel=1]' }] },
          'id-reusing-agent': { steps: [{ id: 'agent', kind: 'agent', tools: ['order-lookup'], system: 'Answer with the tools. [sim-agent tool-turns=2 parallel=1 repeat-ids]' }] },
        },
      },
    });
    api = stack.api;
    sim = stack.sim;
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
  });

  it('fails an answer past maxTokens × 16 + 16 KiB at once, not retried, and hangs up on the provider', async () => {
    await resetSim();
    // 1 MB spread over 20 s: read to the end it would hold the call (and the run) that long.
    await setFaults('anthropic', { answerBytes: 1_000_000, latencyMs: 20_000 });
    const started = Date.now();
    const done = await run('one-answer');
    expect(done.status).toMatch(/^(failed|dead_lettered)$/);
    expect(done.error).toMatchObject({ code: 'dependency_error', retryable: false });
    expect(done.error.message).toMatch(/^anthropic: the answer passed its bound of 24576 bytes \(maxTokens 512 × 16 \+ 16384\) with \d+ bytes received$/);
    expect(Date.now() - started).toBeLessThan(10_000);
    const s = await eventually(async () => ((await stats()).concurrent.anthropic === 0 ? stats() : undefined), 5_000, 'the simulator to see the call hung up');
    expect(s.calls.anthropic).toBe(1);
  }, 60_000);

  it('charges an answer whose usage is implausible from its bytes: 20,000 bytes reported as 1 token count 5,000', async () => {
    await resetSim();
    await setFaults('anthropic', { answerBytes: 20_000, reportedOutputTokens: 1 });
    const done = await run('one-answer');
    expect(done.status, JSON.stringify(done.error)).toBe('completed');
    expect(done.result.steps[0].output.usage.outputTokens).toBe(5_000);
    expect(done.result.usage).toMatchObject({ outputTokens: 5_000, llmCalls: 1 });
    await stack.front.waitForLog((l) => l.msg === 'the provider reported fewer output tokens than its answer’s bytes can be; counting them from the bytes' && l.reportedOutputTokens === 1 && l.countedOutputTokens === 5_000, 10_000);
  }, 60_000);

  it('fails an agent whose turn passes processor.maxStepOutputBytes before it is journaled', async () => {
    await resetSim();
    await setFaults('anthropic', { answerBytes: 300_000 });
    const done = await run('verbose-agent');
    expect(done.status).toMatch(/^(failed|dead_lettered)$/);
    expect(done.error).toMatchObject({ code: 'output_too_large', retryable: false });
    expect(done.error.message).toMatch(/^step 1\/1 \(agent\): turn 1's answer is \d+ bytes, over the bound of 262144 \(processor\.maxStepOutputBytes\)$/);
    // The turn asked for a lookup: none was made.
    expect((await stats()).calls['order-lookup']).toBeUndefined();
  }, 60_000);

  it('makes each turn\'s tool call when the model uses a tool_use id again in a later turn', async () => {
    await resetSim();
    const done = await run('id-reusing-agent');
    expect(done.status, JSON.stringify(done.error)).toBe('completed');
    expect(done.result.steps[0].output.agent.transcript.map((t: { tools: { id: string }[] }) => t.tools.map((c) => c.id))).toEqual([['toolu_sim_0'], ['toolu_sim_0'], []]);
    const s = await stats();
    // Two lookups (A-1000, then A-1001), each with its effect: none answered with the other's response.
    expect(s.sideEffects).toEqual({ 'order-lookup': 2 });
    expect(s.duplicateDeliveries).toEqual({});
  }, 60_000);
});
