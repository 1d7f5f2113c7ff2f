import { describe, expect, it } from 'vitest';
import { ADMITTED_SEQUENCE, MAX_STEPS, SLOTS_PER_ATTEMPT, slotsPerStep, stepSequence, terminalSequence } from '../../../src/runs/status-sequence.js';

describe('status sequence numbers', () => {
  it('has the documented constants', () => {
    expect(ADMITTED_SEQUENCE).toBe(0);
    expect(SLOTS_PER_ATTEMPT).toBe(1000);
    expect(MAX_STEPS).toBe(998);
  });

  it('numbers steps and the terminal event of an attempt deterministically', () => {
    expect(stepSequence(1, 0)).toBe(1001);
    expect(stepSequence(1, 1)).toBe(1002);
    expect(stepSequence(1, MAX_STEPS - 1)).toBe(1998);
    expect(terminalSequence(1)).toBe(1999);
    expect(stepSequence(2, 0)).toBe(2001);
    expect(terminalSequence(2)).toBe(2999);
    expect(terminalSequence(7)).toBe(7999);
  });

  it('strictly increases from admission through steps to terminal, within and across attempts', () => {
    const seq: number[] = [ADMITTED_SEQUENCE];
    for (let attempt = 1; attempt <= 4; attempt++) {
      for (let step = 0; step < MAX_STEPS; step++) seq.push(stepSequence(attempt, step));
      seq.push(terminalSequence(attempt));
    }
    for (let i = 1; i < seq.length; i++) expect(seq[i]!).toBeGreaterThan(seq[i - 1]!);
    expect(new Set(seq).size).toBe(seq.length);
  });

  it('puts every number of attempt n below every number of attempt n+1', () => {
    for (let attempt = 1; attempt < 20; attempt++) {
      expect(terminalSequence(attempt)).toBeLessThan(stepSequence(attempt + 1, 0));
      expect(stepSequence(attempt, 0)).toBeGreaterThan(ADMITTED_SEQUENCE);
    }
  });

  it('is the same for the same inputs (redelivery re-emits the same numbers)', () => {
    expect(stepSequence(3, 5)).toBe(stepSequence(3, 5));
    expect(terminalSequence(3)).toBe(terminalSequence(3));
  });

  it('stays a safe integer for large attempt numbers', () => {
    expect(Number.isSafeInteger(terminalSequence(1_000_000))).toBe(true);
  });

  it('throws RangeError for an attempt that is not a positive integer', () => {
    for (const bad of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => stepSequence(bad, 0)).toThrow(RangeError);
      expect(() => terminalSequence(bad)).toThrow(RangeError);
    }
    expect(() => stepSequence(0, 0)).toThrow('attempt must be a positive integer, got 0');
    expect(() => terminalSequence(-2)).toThrow('attempt must be a positive integer, got -2');
  });

  it('throws RangeError for a step index outside [0, MAX_STEPS)', () => {
    for (const bad of [-1, MAX_STEPS, MAX_STEPS + 1, 0.5, Number.NaN]) {
      expect(() => stepSequence(1, bad)).toThrow(RangeError);
    }
    expect(() => stepSequence(1, MAX_STEPS)).toThrow(`step index must be in [0, 998), got 998`);
  });

  it('never lets a step collide with the terminal slot', () => {
    expect(stepSequence(1, MAX_STEPS - 1)).toBeLessThan(terminalSequence(1));
  });

  it('gives each step of a workflow with an agent an equal block of numbers, in step order', () => {
    const steps = [{ kind: 'llm' }, { kind: 'agent' }, { kind: 'tool' }];
    const slots = slotsPerStep(steps);
    expect(slots).toBe(332);
    expect(slotsPerStep([{ kind: 'llm' }, { kind: 'tool' }])).toBe(1);
    expect(slotsPerStep([{ kind: 'agent' }])).toBe(MAX_STEPS);
    expect(slotsPerStep(Array.from({ length: 50 }, () => ({ kind: 'agent' })))).toBe(19);
    const numbers = [0, 1, 2].flatMap((step) => [0, 1, slots - 1].map((progress) => stepSequence(2, step, { progress, slots })));
    expect(numbers).toEqual([...numbers].sort((a, b) => a - b));
    expect(new Set(numbers).size).toBe(numbers.length);
    expect(stepSequence(2, 1, { progress: 0, slots })).toBe(2000 + 332 + 1);
    expect(stepSequence(2, 2, { progress: slots - 1, slots })).toBeLessThan(terminalSequence(2));
    // Without an agent the numbers are those of one slot per step.
    expect(stepSequence(1, 3, { progress: 0, slots: 1 })).toBe(stepSequence(1, 3));
  });

  it('refuses progress outside its step\'s block and blocks past the attempt\'s numbers', () => {
    expect(() => stepSequence(1, 0, { progress: 332, slots: 332 })).toThrow('progress must be in [0, 332), got 332');
    expect(() => stepSequence(1, 0, { progress: -1, slots: 332 })).toThrow(RangeError);
    expect(() => stepSequence(1, 3, { progress: 0, slots: 332 })).toThrow(RangeError);
    expect(() => stepSequence(1, 0, { progress: 0, slots: 0 })).toThrow(RangeError);
  });
});
