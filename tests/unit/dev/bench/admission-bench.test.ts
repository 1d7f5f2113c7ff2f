import { describe, expect, it } from 'vitest';
import { processCpuMs } from '../../../../src/dev/bench/admission-bench.js';

describe('processCpuMs', () => {
  it('counts the CPU a process spends, as process.cpuUsage counts it for this one', () => {
    const before = processCpuMs(process.pid);
    const usageBefore = process.cpuUsage();
    const until = Date.now() + 300;
    let spin = 0;
    while (Date.now() < until) spin++;
    const usage = process.cpuUsage(usageBefore);
    const spent = processCpuMs(process.pid) - before;
    const expected = (usage.user + usage.system) / 1000;
    expect(spin).toBeGreaterThan(0);
    // /proc counts in clock ticks (10 ms at 100 Hz).
    expect(Math.abs(spent - expected)).toBeLessThanOrEqual(30);
    expect(spent).toBeGreaterThan(0);
  });
});
