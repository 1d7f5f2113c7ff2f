/** The agent bench's figures: what each phase's measured windows add up to, and the phases against each other. */
import { latencySummary } from './latency-summary.js';

/** What one measured window of a phase saw. */
export interface AgentWindow {
  runs: number;
  /** From the first submit to the last run seen finished. */
  totalSec: number;
  /** Admission to the completed status event, of the runs that completed. */
  latenciesMs: readonly number[];
  /** The completed attempt's start to the completed status event: the latency without the wait for a slot. */
  runTimesMs: readonly number[];
  /** Messages API calls the simulator answered over the window. */
  modelTurns: number;
  /** Tool calls the simulator answered over the window. */
  toolCalls: number;
  /** Processor CPU (user + system) over the window; undefined when its metrics could not be read. */
  cpuSec: number | undefined;
  /** Time runs spent executing (sluice_run_execution_seconds), summed; undefined as cpuSec. */
  execSec: number | undefined;
  outcomes: Readonly<Record<string, number>>;
}

/** A phase over all its rounds. A figure that could not be measured in some window is NaN. */
export interface AgentPhaseFigures {
  runs: number;
  runsPerSec: number;
  latencyMs: { p50: number; p99: number };
  runTimeMs: { p50: number; p99: number };
  execMsPerRun: number;
  turnsPerRun: number;
  toolCallsPerRun: number;
  cpuMsPerRun: number;
  cpuMsPerTurn: number;
  outcomes: Record<string, number>;
}

const sumOf = (xs: readonly (number | undefined)[]): number => xs.reduce<number>((s, x) => s + (x ?? NaN), 0);

/** Sums the windows (runs/s is all runs over all their time, percentiles over all their latencies). */
export function agentPhaseFigures(windows: readonly AgentWindow[]): AgentPhaseFigures {
  const runs = sumOf(windows.map((w) => w.runs));
  const turns = sumOf(windows.map((w) => w.modelTurns));
  const cpuMs = sumOf(windows.map((w) => w.cpuSec)) * 1000;
  const latency = latencySummary(windows.flatMap((w) => w.latenciesMs));
  const runTime = latencySummary(windows.flatMap((w) => w.runTimesMs));
  const outcomes: Record<string, number> = {};
  for (const w of windows) for (const [status, n] of Object.entries(w.outcomes)) outcomes[status] = (outcomes[status] ?? 0) + n;
  return {
    runs,
    runsPerSec: runs / sumOf(windows.map((w) => w.totalSec)),
    latencyMs: { p50: latency.p50, p99: latency.p99 },
    runTimeMs: { p50: runTime.p50, p99: runTime.p99 },
    execMsPerRun: (sumOf(windows.map((w) => w.execSec)) * 1000) / runs,
    turnsPerRun: turns / runs,
    toolCallsPerRun: sumOf(windows.map((w) => w.toolCalls)) / runs,
    cpuMsPerRun: cpuMs / runs,
    cpuMsPerTurn: cpuMs / turns,
    outcomes,
  };
}

/** The agent phases against the fixed workflow (a), and sequential fan-out (c) against parallel (b). */
export interface AgentRatios {
  runsPerSec: { bToA: number; cToA: number };
  cpuPerTurn: { bToA: number; cToA: number };
  latency: { p50CToB: number; p99CToB: number };
  runTime: { p50CToB: number; p99CToB: number };
}

export function agentRatios(a: AgentPhaseFigures, b: AgentPhaseFigures, c: AgentPhaseFigures): AgentRatios {
  return {
    runsPerSec: { bToA: b.runsPerSec / a.runsPerSec, cToA: c.runsPerSec / a.runsPerSec },
    cpuPerTurn: { bToA: b.cpuMsPerTurn / a.cpuMsPerTurn, cToA: c.cpuMsPerTurn / a.cpuMsPerTurn },
    latency: { p50CToB: c.latencyMs.p50 / b.latencyMs.p50, p99CToB: c.latencyMs.p99 / b.latencyMs.p99 },
    runTime: { p50CToB: c.runTimeMs.p50 / b.runTimeMs.p50, p99CToB: c.runTimeMs.p99 / b.runTimeMs.p99 },
  };
}
