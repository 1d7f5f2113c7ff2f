import { describe, expect, it } from 'vitest';
import { measuresAdmissionWait, secondsSinceAdmission } from '../../../src/processors/run-signals.js';

const ADMITTED = Date.UTC(2026, 0, 1, 12, 0, 0);

describe('secondsSinceAdmission', () => {
  it('is the time from admission in seconds', () => {
    expect(secondsSinceAdmission(ADMITTED, ADMITTED + 2_500)).toBe(2.5);
    expect(secondsSinceAdmission(ADMITTED, ADMITTED)).toBe(0);
  });

  it('reads a processor clock behind the API\'s as 0, never as a negative time', () => {
    expect(secondsSinceAdmission(ADMITTED, ADMITTED - 800)).toBe(0);
  });
});

describe('measuresAdmissionWait', () => {
  it('measures an attempt that starts from an admission: the first, or a DLQ replay (no due time)', () => {
    expect(measuresAdmissionWait({ dueAt: null }, 0)).toBe(true);
  });

  it('does not measure a run-level retry: it has a due time, and its time since admission is earlier attempts and a backoff', () => {
    expect(measuresAdmissionWait({ dueAt: ADMITTED + 5_000 }, 0)).toBe(false);
  });

  it('does not measure a start repeated after an infrastructure failure: the first start was measured', () => {
    expect(measuresAdmissionWait({ dueAt: null }, 1)).toBe(false);
    expect(measuresAdmissionWait({ dueAt: null }, 7)).toBe(false);
  });
});
