import { describe, expect, it } from 'vitest';
import { httpOutcome, type SubmitAnswer } from '../../../src/api/http-outcome.js';

describe('httpOutcome', () => {
  it.each(['admitted', 'queued', 'deferred', 'rejected'] as const)('labels a submission decided %s by its decision', (decided) => {
    expect(httpOutcome(true, decided)).toBe(decided);
  });

  it('labels a submission answered without a decision an error', () => {
    expect(httpOutcome(true, undefined)).toBe('error');
  });

  it('labels a replayed answer other: read back, not decided', () => {
    expect(httpOutcome(true, 'replayed')).toBe('other');
  });

  it.each([undefined, 'admitted', 'queued', 'deferred', 'rejected', 'replayed'] as (SubmitAnswer | undefined)[])('labels anything but a submission other (answer %s)', (answered) => {
    expect(httpOutcome(false, answered)).toBe('other');
  });
});
