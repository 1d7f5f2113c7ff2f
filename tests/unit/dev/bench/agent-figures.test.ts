import { describe, expect, it } from 'vitest';
import { agentPhaseFigures, agentRatios, type AgentPhaseFigures, type AgentWindow } from '../../../../src/dev/bench/agent-figures.js';

const window = (over: Partial<AgentWindow> = {}): AgentWindow => ({
  runs: 100,
  totalSec: 2,
  latenciesMs: Array.from({ length: 100 }, (_, i) => i + 1),
  runTimesMs: Array.from({ length: 100 }, (_, i) => i + 101),
  modelTurns: 300,
  toolCalls: 400,
  cpuSec: 1.5,
  execSec: 20,
  outcomes: { completed: 100 },
  ...over,
});

describe('agentPhaseFigures', () => {
  it('divides one window by its runs and its model turns', () => {
    expect(agentPhaseFigures([window()])).toEqual({
      runs: 100,
      runsPerSec: 50,
      latencyMs: { p50: 50, p99: 99 },
      runTimeMs: { p50: 150, p99: 199 },
      execMsPerRun: 200,
      turnsPerRun: 3,
      toolCallsPerRun: 4,
      cpuMsPerRun: 15,
      cpuMsPerTurn: 5,
      outcomes: { completed: 100 },
    });
  });

  it('adds rounds up: all runs over all their time, percentiles over all latencies, outcomes summed', () => {
    const rounds = [
      window({ totalSec: 1, latenciesMs: Array<number>(99).fill(10), runTimesMs: Array<number>(99).fill(5), outcomes: { completed: 99, failed: 1 } }),
      window({ totalSec: 3, latenciesMs: Array<number>(100).fill(1_000), runTimesMs: Array<number>(100).fill(300), cpuSec: 2.5 }),
    ];
    const f = agentPhaseFigures(rounds);
    expect([f.runs, f.runsPerSec, f.execMsPerRun, f.turnsPerRun, f.toolCallsPerRun, f.cpuMsPerRun, f.cpuMsPerTurn]).toEqual([200, 50, 200, 3, 4, 20, 4_000 / 600]);
    expect({ latency: f.latencyMs, runTime: f.runTimeMs }).toEqual({ latency: { p50: 1_000, p99: 1_000 }, runTime: { p50: 300, p99: 300 } });
    expect(f.outcomes).toEqual({ completed: 199, failed: 1 });
  });

  it('is NaN for CPU and execution time when any window could not read the metrics, and for latency when nothing completed', () => {
    const f = agentPhaseFigures([window(), window({ cpuSec: undefined, execSec: undefined, latenciesMs: [], runTimesMs: [] })]);
    expect(f.cpuMsPerRun).toBeNaN();
    expect(f.cpuMsPerTurn).toBeNaN();
    expect(f.execMsPerRun).toBeNaN();
    expect(f.runsPerSec).toBe(50);
    const none = agentPhaseFigures([window({ latenciesMs: [], runTimesMs: [] })]);
    expect(none.latencyMs.p50).toBeNaN();
    expect(none.runTimeMs.p99).toBeNaN();
  });
});

describe('agentRatios', () => {
  const figures = (runsPerSec: number, cpuMsPerTurn: number, p50: number, p99: number): AgentPhaseFigures => ({
    runs: 100,
    runsPerSec,
    latencyMs: { p50, p99 },
    runTimeMs: { p50: p50 / 10, p99: p99 / 10 },
    execMsPerRun: 0,
    turnsPerRun: 3,
    toolCallsPerRun: 4,
    cpuMsPerRun: cpuMsPerTurn * 3,
    cpuMsPerTurn,
    outcomes: {},
  });

  it('sets both agent phases against the fixed workflow, and sequential latency against parallel', () => {
    const r = agentRatios(figures(100, 2, 50, 80), figures(50, 3, 100, 200), figures(25, 4, 250, 300));
    expect(r.runsPerSec).toEqual({ bToA: 0.5, cToA: 0.25 });
    expect(r.cpuPerTurn).toEqual({ bToA: 1.5, cToA: 2 });
    expect(r.latency).toEqual({ p50CToB: 2.5, p99CToB: 1.5 });
    expect(r.runTime).toEqual({ p50CToB: 2.5, p99CToB: 1.5 });
  });
});
