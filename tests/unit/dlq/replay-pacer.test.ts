import { describe, expect, it } from 'vitest';
import { pacer } from '../../../src/dlq/replay-pacer.js';

describe('pacer', () => {
  it('paces calls at the rate, the first at once', async () => {
    let clock = 1_000;
    const slept: number[] = [];
    const pace = pacer(4, () => clock, async (ms) => {
      slept.push(ms);
      clock += ms;
    });
    await pace();
    await pace();
    clock += 100;
    await pace();
    clock += 1_000;
    await pace();
    expect(slept).toEqual([250, 150]);
  });
});
