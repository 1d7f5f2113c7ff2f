import { describe, expect, it } from 'vitest';
import { AttemptCalls, endCounts, isProviderCall } from '../../../src/execution/goodput.js';
import { MemoryRunCalls, callArgs, parseRunEnd } from '../../../src/execution/run-progress.js';
import { NOW, RUN } from './fixtures.js';

const calls = new Map([['anthropic', 2], ['orders', 1]]);

describe('endCounts', () => {
  it('counts a real answer by its deadline as on time, and none of its calls as wasted', () => {
    expect(endCounts('completed', NOW, NOW, calls)).toEqual({ onTime: true, degraded: false, wasted: [] });
  });

  it('counts a real answer after its deadline as late, not wasted', () => {
    expect(endCounts('completed', NOW + 1, NOW, calls)).toEqual({ onTime: false, degraded: false, wasted: [] });
  });

  it('counts a stand-in answer as degraded, its calls wasted under that reason', () => {
    expect(endCounts('degraded', NOW, NOW + 1_000, calls)).toEqual({
      onTime: false,
      degraded: true,
      wasted: [{ dependency: 'anthropic', reason: 'degraded', calls: 2 }, { dependency: 'orders', reason: 'degraded', calls: 1 }],
    });
  });

  it.each(['failed', 'dead_lettered', 'expired', 'cancelled'] as const)('counts every call of a run that ended %s as wasted, by that reason', (end) => {
    expect(endCounts(end, NOW, NOW + 1_000, calls).wasted).toEqual([{ dependency: 'anthropic', reason: end, calls: 2 }, { dependency: 'orders', reason: end, calls: 1 }]);
  });

  it('leaves out a dependency with no calls', () => {
    expect(endCounts('failed', NOW, NOW, new Map([['anthropic', 0]])).wasted).toEqual([]);
  });
});

describe('isProviderCall', () => {
  it('judges LLM calls and calls to rate-limited dependencies, not unpaced tools', () => {
    expect(isProviderCall({ kind: 'llm', rateLimit: undefined })).toBe(true);
    expect(isProviderCall({ kind: 'tool', rateLimit: { requestsPerMinute: 60, burstSeconds: 1 } })).toBe(true);
    expect(isProviderCall({ kind: 'tool', rateLimit: undefined })).toBe(false);
  });
});

describe('AttemptCalls', () => {
  it("counts an attempt's calls per dependency until they are taken, then starts again", () => {
    const attempt = new AttemptCalls();
    attempt.add(RUN, 'anthropic');
    attempt.add(RUN, 'anthropic');
    attempt.add({ ...RUN }, 'anthropic');
    expect(attempt.take(RUN)).toEqual(new Map([['anthropic', 2]]));
    expect(attempt.take(RUN)).toEqual(new Map());
  });
});

describe("a run's calls over its attempts", () => {
  it('travel to run-progress-*.lua as dependency and count pairs, and come back from its end', () => {
    expect(callArgs(calls)).toEqual(['anthropic', '2', 'orders', '1']);
    expect(parseRunEnd(['1', 'anthropic', '3'])).toEqual(new Map([['anthropic', 3]]));
    expect(parseRunEnd(['1'])).toEqual(new Map());
    expect(parseRunEnd([''])).toBeUndefined();
  });

  it('in memory: end once per admission with every attempt\'s calls; a replay ends anew with the calls since', async () => {
    const record = new MemoryRunCalls();
    await record.addCalls(RUN.runId, new Map([['anthropic', 1]]));
    expect(await record.end(RUN, new Map([['anthropic', 1]]))).toEqual(new Map([['anthropic', 2]]));
    expect(await record.end(RUN, new Map())).toBeUndefined();
    expect(await record.end({ ...RUN, admittedAt: NOW }, new Map([['anthropic', 1]]))).toEqual(new Map([['anthropic', 1]]));
  });
});
