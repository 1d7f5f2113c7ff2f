import { describe, expect, it } from 'vitest';
import { expectedArrivals, faultAt, firstSends, sendTimesMs } from '../../../../../src/dev/bench/scenarios/arrivals.js';
import { loadScenario, loadScenarios, type ArrivalPattern, type FaultWindow } from '../../../../../src/dev/bench/scenarios/scenario.js';
import { seededRandom } from '../../../../../src/util/seeded-random.js';

const constant: ArrivalPattern = { kind: 'constant', rate: 20 };
const ramp: ArrivalPattern = { kind: 'ramp', from: 0, to: 40, overSec: 30 };
const spike: ArrivalPattern = { kind: 'spike', base: 2, peak: 60, atSec: 30, forSec: 30 };

function countIn(times: readonly number[], fromMs: number, toMs: number): number {
  return times.filter((t) => t >= fromMs && t < toMs).length;
}

describe('sendTimesMs', () => {
  it.each([
    ['constant', constant, 20 * 90],
    ['ramp', ramp, (40 * 30) / 2 + 40 * 60],
    ['spike', spike, 2 * 60 + 60 * 30],
  ] as const)('sends rate x duration for a %s pattern, within one', (_, pattern, expected) => {
    expect(expectedArrivals(pattern, 90)).toBe(expected);
    for (const seed of [1, 2, 3]) {
      const times = sendTimesMs(pattern, 90, 1, seededRandom(seed));
      expect(Math.abs(times.length - expected)).toBeLessThanOrEqual(1);
      expect(times.every((t, i) => t >= 0 && t < 90_000 && (i === 0 || t >= times[i - 1]!))).toBe(true);
    }
  });

  it('is deterministic per seed and differs between seeds', () => {
    expect(sendTimesMs(spike, 90, 1, seededRandom(7))).toEqual(sendTimesMs(spike, 90, 1, seededRandom(7)));
    expect(sendTimesMs(spike, 90, 1, seededRandom(7))).not.toEqual(sendTimesMs(spike, 90, 1, seededRandom(8)));
  });

  it('shapes a spike: base before and after, peak during, each second within one of its rate', () => {
    const times = sendTimesMs(spike, 90, 1, seededRandom(1));
    expect(countIn(times, 0, 30_000)).toBeGreaterThanOrEqual(59);
    expect(countIn(times, 0, 30_000)).toBeLessThanOrEqual(61);
    expect(countIn(times, 30_000, 60_000)).toBeGreaterThanOrEqual(1799);
    expect(countIn(times, 30_000, 60_000)).toBeLessThanOrEqual(1801);
    for (let s = 0; s < 90; s++) {
      const rate = s >= 30 && s < 60 ? 60 : 2;
      expect(Math.abs(countIn(times, s * 1000, (s + 1) * 1000) - rate), `second ${s}`).toBeLessThanOrEqual(1);
    }
  });

  it('ramps the rate linearly: the last second of the ramp sends about 40 times the first', () => {
    const times = sendTimesMs({ kind: 'ramp', from: 1, to: 40, overSec: 30 }, 30, 1, seededRandom(3));
    expect(countIn(times, 0, 1000)).toBeLessThanOrEqual(2);
    expect(Math.abs(countIn(times, 29_000, 30_000) - 39.35)).toBeLessThanOrEqual(1);
  });

  it('compresses time by the scale and keeps the rate', () => {
    const times = sendTimesMs(spike, 90, 10, seededRandom(1));
    expect(Math.abs(times.length - (2 * 60 + 60 * 30) / 10)).toBeLessThanOrEqual(1);
    expect(times.every((t) => t < 9_000)).toBe(true);
    // The peak now runs from 3 s to 6 s, still at 60 per second.
    expect(Math.abs(countIn(times, 3_000, 6_000) - 180)).toBeLessThanOrEqual(1);
    expect(Math.abs(countIn(times, 0, 3_000) - 6)).toBeLessThanOrEqual(1);
  });

  it('sends nothing at rate zero and refuses a scale below one', () => {
    expect(sendTimesMs({ kind: 'constant', rate: 0 }, 60, 1, seededRandom(1))).toEqual([]);
    expect(() => sendTimesMs(constant, 60, 0.5, seededRandom(1))).toThrow(/at least 1/);
  });
});

describe('faultAt', () => {
  const timeline: FaultWindow[] = [
    { atSec: 10, forSec: 20, target: 'anthropic', fault: { latencyMs: 500 } },
    { atSec: 20, forSec: 20, target: 'anthropic', fault: { errorStatus: 429, errorRate: 0.5, latencyMs: 100 } },
    { atSec: 15, forSec: 5, target: 'report', fault: { hang: true } },
  ];

  it('holds a window from atSec inclusive to its end exclusive', () => {
    expect(faultAt(timeline, 9_999).size).toBe(0);
    expect(faultAt(timeline, 10_000).get('anthropic')).toEqual({ latencyMs: 500 });
    expect(faultAt(timeline, 39_999).get('anthropic')).toEqual({ errorStatus: 429, errorRate: 0.5, latencyMs: 100 });
    expect(faultAt(timeline, 40_000).size).toBe(0);
  });

  it('applies overlapping windows of a target in file order, later fields over earlier ones', () => {
    expect(faultAt(timeline, 25_000).get('anthropic')).toEqual({ latencyMs: 100, errorStatus: 429, errorRate: 0.5 });
    const reversed = faultAt([timeline[1]!, timeline[0]!], 25_000).get('anthropic');
    expect(reversed).toEqual({ latencyMs: 500, errorStatus: 429, errorRate: 0.5 });
  });

  it('keeps targets apart and scales the timeline like the arrivals', () => {
    const at = faultAt(timeline, 17_000);
    expect([...at.keys()].sort()).toEqual(['anthropic', 'report']);
    expect(at.get('report')).toEqual({ hang: true });
    expect(faultAt(timeline, 1_700, 10)).toEqual(at);
    expect(faultAt(timeline, 4_000, 10).size).toBe(0);
  });
});

describe('the scenario files scheduled', () => {
  it.each([1, 10])('send each stream its expected count within one at time scale %i', (scale) => {
    for (const s of loadScenarios()) {
      for (const [i, stream] of s.arrivals.entries()) {
        const times = sendTimesMs(stream.pattern, s.durationSec, scale, seededRandom(i + 1));
        const expected = expectedArrivals(stream.pattern, s.durationSec) / scale;
        expect(Math.abs(times.length - expected), `${s.name} stream ${i}`).toBeLessThanOrEqual(1);
        expect(times.every((t) => t < (s.durationSec * 1000) / scale), `${s.name} stream ${i}`).toBe(true);
      }
    }
  });
});

describe('firstSends', () => {
  it('merges the streams\' schedules in time order, stream i seeded by seed + i, so leaving one out moves no other', () => {
    const scenario = loadScenario('capacity-avalanche');
    const all = firstSends(scenario, 10, 7);
    expect(all.map((s) => s.dueMs)).toEqual([...all.map((s) => s.dueMs)].sort((a, b) => a - b));
    scenario.arrivals.forEach((a, i) => expect(all.filter((s) => s.stream === i).map((s) => s.dueMs)).toEqual(sendTimesMs(a.pattern, scenario.durationSec, 10, seededRandom(7 + i))));
    expect(firstSends(scenario, 10, 7, (i) => i === 0)).toEqual(all.filter((s) => s.stream !== 0));
  });
});
