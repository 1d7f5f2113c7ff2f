import { describe, expect, it } from 'vitest';
import { cpuShares, machineBusyCpuMs, processCpuMs, readCpu, REST_OF_MACHINE } from '../../../../src/dev/bench/cpu-time.js';

const spin = (ms: number) => {
  const until = Date.now() + ms;
  let n = 0;
  while (Date.now() < until) n++;
  return n;
};

describe('processCpuMs', () => {
  it('counts the CPU a process spends, as process.cpuUsage counts it for this one', () => {
    const before = processCpuMs(process.pid);
    const usageBefore = process.cpuUsage();
    expect(spin(300)).toBeGreaterThan(0);
    const usage = process.cpuUsage(usageBefore);
    const spent = processCpuMs(process.pid) - before;
    const expected = (usage.user + usage.system) / 1000;
    // /proc counts in clock ticks (10 ms at 100 Hz).
    expect(Math.abs(spent - expected)).toBeLessThanOrEqual(30);
    expect(spent).toBeGreaterThan(0);
  });
});

describe('machineBusyCpuMs', () => {
  it('grows at least by what this process spends busy', () => {
    const before = machineBusyCpuMs();
    const usageBefore = process.cpuUsage();
    expect(spin(300)).toBeGreaterThan(0);
    const usage = process.cpuUsage(usageBefore);
    expect(machineBusyCpuMs() - before).toBeGreaterThanOrEqual((usage.user + usage.system) / 1000 - 30);
  });
});

describe('cpuShares', () => {
  const reading = (atMs: number, machineBusyMs: number, processes: Record<string, number>) => ({ atMs, machineBusyMs, processes });

  it('answers each process and the machine in % of one core over the window, and the rest as what none of them used', () => {
    const shares = cpuShares(reading(0, 1_000, { api: 100, processor: 50 }), reading(2_000, 4_000, { api: 700, processor: 1_050 }), 2);
    expect(shares).toEqual({ windowSec: 2, cores: 2, machineBusyPercent: 150, byProcess: { api: 30, processor: 50, [REST_OF_MACHINE]: 70 } });
  });

  it('leaves out a process missing from the first reading, and never answers a negative rest', () => {
    const shares = cpuShares(reading(0, 0, {}), reading(1_000, 100, { late: 500 }), 2);
    expect(shares.byProcess).toEqual({ [REST_OF_MACHINE]: 10 });
    expect(cpuShares(reading(0, 0, { a: 0 }), reading(1_000, 100, { a: 300 }), 2).byProcess[REST_OF_MACHINE]).toBe(0);
  });

  it('reads the counters of real processes: this one spinning shows about its share', () => {
    const before = readCpu({ self: () => processCpuMs(process.pid) });
    spin(400);
    const shares = cpuShares(before, readCpu({ self: () => processCpuMs(process.pid) }));
    expect(shares.byProcess.self).toBeGreaterThan(50);
    expect(shares.machineBusyPercent).toBeGreaterThanOrEqual(shares.byProcess.self! - 10);
  });
});
