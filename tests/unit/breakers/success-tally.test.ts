import { describe, expect, it } from 'vitest';
import { SuccessTally, tallyWindows } from '../../../src/breakers/success-tally.js';

const T0 = 1_700_000_000_000;
const W = tallyWindows(30_000);

describe('tallyWindows', () => {
  it('sends a tally within a twentieth of the window, a second at most', () => {
    expect(tallyWindows(30_000)).toEqual({ windowMs: 30_000, maxDelayMs: 1_000 });
    expect(tallyWindows(4_000)).toEqual({ windowMs: 4_000, maxDelayMs: 200 });
  });
});

describe('SuccessTally', () => {
  it('keeps counting until the oldest pending success waited maxDelayMs, then hands them all over', () => {
    const t = new SuccessTally();
    expect(t.add('llm', T0, W)).toBe(0);
    expect(t.add('llm', T0 + 400, W)).toBe(0);
    expect(t.add('llm', T0 + 999, W)).toBe(0);
    expect(t.add('llm', T0 + 1_000, W)).toBe(4);
    // Counting starts afresh.
    expect(t.add('llm', T0 + 1_001, W)).toBe(0);
    expect(t.take('llm', T0 + 1_002, W.windowMs)).toBe(1);
    expect(t.take('llm', T0 + 1_003, W.windowMs)).toBe(0);
  });

  it('keeps dependencies apart', () => {
    const t = new SuccessTally();
    t.add('llm', T0, W);
    t.add('llm', T0, W);
    t.add('tool', T0, W);
    expect(t.take('tool', T0, W.windowMs)).toBe(1);
    expect(t.take('llm', T0, W.windowMs)).toBe(2);
  });

  it('drops successes older than the window: they would not count there', () => {
    const t = new SuccessTally();
    t.add('llm', T0, W);
    expect(t.take('llm', T0 + 30_000, W.windowMs)).toBe(0);
    t.add('llm', T0, W);
    // A success after a long pause starts a new count rather than sending the stale one with it.
    expect(t.add('llm', T0 + 40_000, W)).toBe(0);
    expect(t.take('llm', T0 + 40_001, W.windowMs)).toBe(1);
  });
});
