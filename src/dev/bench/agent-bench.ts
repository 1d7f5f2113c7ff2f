/**
 * `npm run bench agent`: what a model-driven agent step costs next to a fixed workflow, and what
 * running a turn's tool calls side by side buys, end to end through Kafka and one processor, with
 * the phases taking turns in each round on the same Kafka, Redis and simulator.
 */
import { ANTHROPIC_TARGET } from '../sim/fault-profile.js';
import { scrape, withBenchHarness, type BenchHarness } from './bench-harness.js';
import { agentPhaseFigures, agentRatios, type AgentPhaseFigures, type AgentRatios, type AgentWindow } from './agent-figures.js';
import { simAdmin } from './sim-admin.js';
import { promSum } from './sizing-figures.js';
import { runRequest, sluiceConfigDoc, startSimulator, withSluiceProcess } from './sluice-process.js';

export interface AgentBenchOptions {
  /** Runs measured per phase and round. */
  runs: number;
  /** Runs pushed through each phase's processor before measuring: JIT, connections, group join. */
  warmup: number;
  /** maxInFlight and every cap. */
  concurrency: number;
  /** Times each phase is measured, the phases taking turns. */
  rounds: number;
  /** Latency of every simulated tool call; the Messages API answers at 0 ms. */
  toolLatencyMs: number;
  /** Upper bound on one measured window, from the first submit to the last completion. */
  phaseTimeoutSec: number;
  json: boolean;
}

interface AgentPhase {
  label: string;
  workflow: string;
  /** The agent step's bounds.maxParallelTools; unset for the fixed workflow. */
  maxParallelTools?: number;
}

const AGENT_WORKFLOW = 'support-agent';
const PHASES: readonly [AgentPhase, AgentPhase, AgentPhase] = [
  { label: '(a) support-reply (llm → tool → llm)', workflow: 'support-reply' },
  { label: '(b) support-agent, maxParallelTools 4', workflow: AGENT_WORKFLOW, maxParallelTools: 4 },
  { label: '(c) support-agent, maxParallelTools 1', workflow: AGENT_WORKFLOW, maxParallelTools: 1 },
];
const WARMUP_TIMEOUT_MS = 90_000;

/** Every tool target at `latencyMs` and no jitter (the Messages API stays at 0 ms); verified by reading the profiles back. */
async function setToolLatency(simulatorUrl: string, latencyMs: number): Promise<void> {
  const targets = Object.keys((await simAdmin(simulatorUrl, 'GET', '/faults')) as Record<string, unknown>);
  const tools = targets.filter((t) => t !== ANTHROPIC_TARGET);
  for (const target of tools) await simAdmin(simulatorUrl, 'PUT', '/faults', { target, latencyMs, jitterMs: 0 });
  const after = (await simAdmin(simulatorUrl, 'GET', '/faults')) as Record<string, { latencyMs: number; jitterMs: number }>;
  const off = tools.filter((t) => after[t]?.latencyMs !== latencyMs || after[t]?.jitterMs !== 0);
  if (off.length > 0) throw new Error(`simulator tools not at ${latencyMs} ms: ${off.join(', ')}`);
}

/** The bench's config with the agent step's maxParallelTools as the phase says. */
function phaseConfig(base: Record<string, any>, phase: AgentPhase): Record<string, any> {
  if (phase.maxParallelTools === undefined) return base;
  const agent = (base.workflows?.[AGENT_WORKFLOW]?.steps as { kind: string; bounds: Record<string, number> }[] | undefined)?.find((s) => s.kind === 'agent');
  if (!agent) throw new Error(`config/local.yaml has no agent step in workflow ${AGENT_WORKFLOW}`);
  agent.bounds = { ...agent.bounds, maxParallelTools: phase.maxParallelTools };
  return base;
}

/** One phase's processor: a warm-up, then one measured window. */
function measureWindow(h: BenchHarness, opts: AgentBenchOptions, simulatorUrl: string, stamp: string, phase: AgentPhase, index: number): Promise<AgentWindow> {
  const spec = {
    label: phase.label,
    index,
    stamp,
    roles: 'processor',
    config: (o: { registryDir: string; opsPort: number }) => phaseConfig(sluiceConfigDoc({ ...o, simulatorUrl, concurrency: opts.concurrency, enforceCaps: true }), phase),
    maxPending: opts.runs + opts.warmup + 1_000,
  };
  return withSluiceProcess(h, spec, async (p) => {
    await p.runAll(Array.from({ length: opts.warmup }, (_, i) => runRequest(phase.workflow, i)), WARMUP_TIMEOUT_MS, 'warm-up');
    await simAdmin(simulatorUrl, 'POST', '/stats/reset');
    const runs = Array.from({ length: opts.runs }, (_, i) => runRequest(phase.workflow, i));
    const before = await scrape(p.metricsUrl);
    const t = await p.runAll(runs, opts.phaseTimeoutSec * 1000, 'measured runs');
    const after = await scrape(p.metricsUrl);
    const { calls } = (await simAdmin(simulatorUrl, 'GET', '/stats')) as { calls: Record<string, number> };
    const diff = (name: string) => (after && before ? promSum(after, name) - promSum(before, name) : undefined);
    const latenciesMs: number[] = [];
    const runTimesMs: number[] = [];
    for (const r of runs) {
      const f = p.finish(r.runId);
      if (f?.status !== 'completed') continue;
      latenciesMs.push(f.at - r.admittedAt);
      if (f.attemptStartedAt !== null) runTimesMs.push(f.at - f.attemptStartedAt);
    }
    const modelTurns = calls[ANTHROPIC_TARGET] ?? 0;
    return {
      runs: runs.length,
      totalSec: (t.finishedAt - t.startedAt) / 1000,
      latenciesMs,
      runTimesMs,
      modelTurns,
      toolCalls: Object.values(calls).reduce((a, b) => a + b, 0) - modelTurns,
      cpuSec: diff('sluice_process_process_cpu_seconds_total'),
      execSec: diff('sluice_run_execution_seconds_sum'),
      outcomes: p.tally(runs.map((r) => r.runId)),
    };
  });
}

interface AgentBenchReport {
  options: AgentBenchOptions;
  phases: (AgentPhaseFigures & { label: string })[];
  ratios: AgentRatios;
}

const num = (n: number, width: number, digits = 1) => n.toFixed(digits).padStart(width);

function table(r: AgentBenchReport): string {
  const o = r.options;
  const lines = [
    `agent bench: ${o.runs} runs per phase and round (+${o.warmup} warm-up), ${o.rounds} round(s), phases taking turns; concurrency ${o.concurrency}; every simulated tool at ${o.toolLatencyMs} ms, the Messages API at 0 ms`,
    'each window submits its runs at once; runs/s = runs / (last completion − first submit); latency = admission to the completed status event (the wait for a slot in the burst included); run time = the attempt\'s start to it; exec ms = mean time a run executes (metrics); turns and tool calls = simulator calls / runs; cpu = processor process CPU',
    '                                                        latency ms     run time ms',
    '  phase                                      runs    runs/s    p50    p99     p50    p99  exec ms  turns/run  tools/run  cpu ms/run  cpu ms/turn  outcomes',
  ];
  for (const p of r.phases) {
    const outcomes = Object.entries(p.outcomes).map(([s, n]) => `${s}:${n}`).join(' ');
    lines.push(
      `  ${p.label.padEnd(40)} ${String(p.runs).padStart(6)} ${num(p.runsPerSec, 9)} ${num(p.latencyMs.p50, 6, 0)} ${num(p.latencyMs.p99, 6, 0)} ${num(p.runTimeMs.p50, 7, 0)} ${num(p.runTimeMs.p99, 6, 0)} ${num(p.execMsPerRun, 8)} ${num(p.turnsPerRun, 10, 2)} ${num(p.toolCallsPerRun, 10, 2)} ${num(p.cpuMsPerRun, 11, 2)} ${num(p.cpuMsPerTurn, 12, 2)}  ${outcomes}`,
    );
  }
  const q = r.ratios;
  lines.push(`ratios vs (a): runs/s b/a ${q.runsPerSec.bToA.toFixed(2)}, c/a ${q.runsPerSec.cToA.toFixed(2)}; cpu per turn b/a ${q.cpuPerTurn.bToA.toFixed(2)}, c/a ${q.cpuPerTurn.cToA.toFixed(2)}`);
  lines.push(`sequential vs parallel fan-out: latency c/b p50 ${q.latency.p50CToB.toFixed(2)}, p99 ${q.latency.p99CToB.toFixed(2)}; run time c/b p50 ${q.runTime.p50CToB.toFixed(2)}, p99 ${q.runTime.p99CToB.toFixed(2)}`);
  return `${lines.join('\n')}\n`;
}

export async function benchAgent(opts: AgentBenchOptions): Promise<void> {
  const windows = await withBenchHarness('agent', async (h) => {
    const simulatorUrl = await startSimulator(h);
    await setToolLatency(simulatorUrl, opts.toolLatencyMs);
    const stamp = Date.now().toString(36);
    const byPhase: AgentWindow[][] = PHASES.map(() => []);
    for (let round = 0; round < opts.rounds; round++) {
      for (const [i, phase] of PHASES.entries()) {
        const w = await measureWindow(h, opts, simulatorUrl, stamp, phase, round * PHASES.length + i);
        byPhase[i]!.push(w);
        process.stderr.write(`  done: round ${round + 1}, ${phase.label}: ${(w.runs / w.totalSec).toFixed(1)} runs/s\n`);
      }
    }
    return byPhase;
  });
  const [a, b, c] = windows.map(agentPhaseFigures) as [AgentPhaseFigures, AgentPhaseFigures, AgentPhaseFigures];
  const report: AgentBenchReport = {
    options: opts,
    phases: [a, b, c].map((f, i) => ({ label: PHASES[i]!.label, ...f })),
    ratios: agentRatios(a, b, c),
  };
  process.stdout.write(opts.json ? `${JSON.stringify(report)}\n` : table(report));
}
