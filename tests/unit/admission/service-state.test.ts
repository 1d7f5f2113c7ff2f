import { describe, expect, it } from 'vitest';
import { parseServiceHash, SERVICE_BUCKET_SEC } from '../../../src/admission/service-state.js';

// 1 000 000 s since epoch: current bucket 100_000 (10 s buckets), exactly on a bucket boundary.
const NOW_MS = 1_000_000_000;
const CURRENT = NOW_MS / 1000 / SERVICE_BUCKET_SEC;

describe('parseServiceHash', () => {
  it('uses 10-second buckets, as backlog-release.lua is called with', () => {
    expect(SERVICE_BUCKET_SEC).toBe(10);
  });

  it('knows nothing from an empty or missing hash', () => {
    expect(parseServiceHash({}, NOW_MS, 60)).toEqual({ ratePerSec: undefined, serviceTimeMs: undefined });
  });

  it('reads the moving service time and the finish counts per bucket', () => {
    const est = parseServiceHash({ [`b:${CURRENT - 1}`]: '4', [`b:${CURRENT - 6}`]: '2', service_ms: '1234.5' }, NOW_MS, 60);
    expect(est.serviceTimeMs).toBe(1234.5);
    expect(est.ratePerSec).toBeCloseTo(6 / 60, 12);
  });

  it('reads the service time without any finish counts, and counts without a service time', () => {
    expect(parseServiceHash({ service_ms: '250' }, NOW_MS, 60)).toEqual({ ratePerSec: undefined, serviceTimeMs: 250 });
    const est = parseServiceHash({ [`b:${CURRENT}`]: '3' }, NOW_MS + 5_000, 60);
    expect(est.serviceTimeMs).toBeUndefined();
    expect(est.ratePerSec).toBeCloseTo(3 / 65, 12);
  });

  it('reads numbers the way Lua tostring() writes them', () => {
    expect(parseServiceHash({ service_ms: '1e+15' }, NOW_MS, 60).serviceTimeMs).toBe(1e15);
    expect(parseServiceHash({ service_ms: '0.1' }, NOW_MS, 60).serviceTimeMs).toBe(0.1);
    expect(parseServiceHash({ service_ms: '0' }, NOW_MS, 60).serviceTimeMs).toBe(0);
  });

  it('drops a service time that is not a finite number', () => {
    for (const v of ['abc', 'NaN', 'nan', 'inf', '-inf', 'Infinity', '-Infinity', '12ms', '1,5']) {
      expect(parseServiceHash({ service_ms: v }, NOW_MS, 60).serviceTimeMs, v).toBeUndefined();
    }
  });

  // Regression guard (this was a bug): Number('') and Number('  ') are 0, so a blank service_ms reads as "runs take 0 ms"
  // (optimistic deadline estimates) instead of "unknown".
  it('drops a blank service time instead of reading it as 0 ms', () => {
    expect(parseServiceHash({ service_ms: '' }, NOW_MS, 60).serviceTimeMs).toBeUndefined();
    expect(parseServiceHash({ service_ms: '  ' }, NOW_MS, 60).serviceTimeMs).toBeUndefined();
  });

  it('ignores fields that are not b:<whole bucket number>', () => {
    const est = parseServiceHash({ 'b:abc': '100', 'b:-1': '100', 'b:1.5': '100', 'x:100000': '100', [`B:${CURRENT}`]: '100', [`b:${CURRENT}x`]: '100', other: '7' }, NOW_MS, 60);
    expect(est).toEqual({ ratePerSec: undefined, serviceTimeMs: undefined });
  });

  it('ignores buckets outside the window', () => {
    expect(parseServiceHash({ [`b:${CURRENT - 7}`]: '100', [`b:${CURRENT + 1}`]: '100' }, NOW_MS, 60).ratePerSec).toBeUndefined();
  });

  // Regression guard (this was a bug): one non-numeric count makes the sum NaN, and `NaN > 0` is false, so every good
  // bucket is thrown away too: the whole rate becomes "unknown" (deadline refusals switch off).
  it('skips a bucket with a garbage count rather than losing the whole rate', () => {
    const est = parseServiceHash({ [`b:${CURRENT - 1}`]: '6', [`b:${CURRENT - 2}`]: 'garbage' }, NOW_MS, 60);
    expect(est.ratePerSec).toBeCloseTo(6 / 60, 12);
  });
});
