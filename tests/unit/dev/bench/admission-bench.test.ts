import { describe, expect, it } from 'vitest';
import { parseVariant, processCpuMs } from '../../../../src/dev/bench/admission-bench.js';

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

describe('parseVariant', () => {
  it('runs this checkout with write-behind on or off, or another checkout as configured', () => {
    expect(parseVariant('write-behind')).toMatchObject({ label: 'write-behind', writeBehind: true });
    expect(parseVariant('no-write-behind')).toMatchObject({ label: 'no-write-behind', writeBehind: false });
    expect(parseVariant('write-behind').cli).toMatch(/dist\/cli\/main\.js$/);
    expect(parseVariant('checkout:/srv/sluice-main')).toEqual({ label: 'sluice-main', cli: '/srv/sluice-main/dist/cli/main.js' });
    expect(() => parseVariant('checkout:')).toThrow(/checkout:<dir>/);
    expect(() => parseVariant('batching')).toThrow(/checkout:<dir>/);
  });
});
