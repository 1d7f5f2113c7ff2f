import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { RedisRunProgress, answerPollDelayMs, keepStepsMs, parseRunStart } from '../../../src/execution/run-progress.js';
import { createLogger } from '../../../src/obs/logger.js';
import { redisKeys } from '../../../src/redis/keys.js';
import type { LuaScripts } from '../../../src/redis/scripts.js';

const NOW = 1_700_000_000_000;
const RUN = '0190f5a2-7c00-7abc-8def-0123456789ab';
const keys = redisKeys('ns.');

function progress(fake: { run?: LuaScripts['run']; get?: (key: string) => Promise<string | null> }) {
  const warnings: string[] = [];
  const infos: unknown[] = [];
  const logger = createLogger('silent');
  logger.warn = ((_obj: unknown, msg: string) => void warnings.push(msg)) as typeof logger.warn;
  logger.info = ((obj: unknown, msg: string) => void infos.push({ ...(obj as object), msg })) as typeof logger.info;
  const scripts = { run: fake.run ?? (async () => Promise.reject(new Error('no script expected'))) } as unknown as LuaScripts;
  const redis = { get: fake.get ?? (async () => null) } as unknown as Redis;
  // A clock that the waits move, so a wait for an answer takes no real time.
  const clock = { now: NOW, slept: [] as number[] };
  const sleep = async (ms: number) => void (clock.slept.push(ms), (clock.now += ms));
  return { p: new RedisRunProgress(redis, scripts, keys, logger, { produceTimeoutMs: 5_000, checkTimeoutMs: 30, now: () => clock.now, sleep }), warnings, infos, clock };
}

describe('keepStepsMs', () => {
  it('keeps outputs until an hour after the deadline, and a second at least', () => {
    expect(keepStepsMs(NOW + 30_000, NOW)).toBe(3_630_000);
    expect(keepStepsMs(NOW - 10 * 3_600_000, NOW)).toBe(1_000);
  });
});

describe('answerPollDelayMs', () => {
  it('reads a pending answer again soon at first, then every quarter second', () => {
    expect([0, 1, 2, 3, 4, 5, 6, 50].map(answerPollDelayMs)).toEqual([10, 20, 40, 80, 160, 250, 250, 250]);
  });
});

describe('parseRunStart', () => {
  it('reads the cancellation, whether the answer is pending, then step id and output pairs', () => {
    const start = parseRunStart(['', '', 'understand', '{"text":"hi"}', 'lookup-order', 'null']);
    expect(start.cancelled).toBeUndefined();
    expect(start.answerPending).toBe(false);
    expect([...start.done]).toEqual([
      ['understand', { text: 'hi' }],
      ['lookup-order', null],
    ]);
    expect(parseRunStart(['not_acknowledged', '1'])).toMatchObject({ cancelled: 'not_acknowledged', answerPending: true });
    expect(parseRunStart(['', '1']).answerPending).toBe(true);
    expect(parseRunStart(['requested', '']).done.size).toBe(0);
  });

  it('leaves out an output that is not JSON, so its step is called again', () => {
    const start = parseRunStart(['', '', 'understand', '{oops', 'reply', '"ok"']);
    expect([...start.done.keys()]).toEqual(['reply']);
    expect(start.unreadable).toEqual(['understand']);
  });
});

describe('RedisRunProgress', () => {
  it("opens and records with the run's steps hash and cancellation key, one script call each", async () => {
    const calls: unknown[][] = [];
    const { p } = progress({
      run: async (...args) => {
        calls.push(args);
        return args[0] === 'runProgressOpen' ? ['requested', '', 'understand', '{"text":"hi"}'] : 'not_acknowledged';
      },
    });
    expect(await p.open(RUN)).toEqual({ done: new Map([['understand', { text: 'hi' }]]), cancelled: 'requested' });
    expect(await p.record(RUN, 'reply', { text: 'done' }, NOW + 30_000)).toBe('not_acknowledged');
    const runKeys = [keys.runSteps(RUN), keys.cancelRequested(RUN)];
    expect(calls).toEqual([
      ['runProgressOpen', [...runKeys, keys.answerPending(RUN)], []],
      ['runProgressRecord', runKeys, ['reply', '{"text":"done"}', 3_630_000]],
    ]);
    for (const key of [keys.runSteps(RUN), keys.cancelRequested(RUN), keys.answerPending(RUN)]) expect(key).toContain(`{${RUN}}`);
  });

  it('waits while the submission is unanswered, and starts the run once it is accepted', async () => {
    const replies = [['', '1'], ['', '1'], ['', '1'], ['', '']];
    const { p, clock, warnings } = progress({ run: async () => replies.shift()! });
    expect(await p.open(RUN)).toEqual({ done: new Map(), cancelled: undefined });
    expect(clock.slept).toEqual([10, 20, 40]);
    expect(warnings).toEqual([]);
  });

  it('a submission answered 503 while its run waited reads as cancelled, whether or not its pending mark is still there', async () => {
    const replies = [['', '1'], ['not_acknowledged', '1']];
    const { p, clock, infos } = progress({ run: async () => replies.shift()! });
    expect(await p.open(RUN)).toEqual({ done: new Map(), cancelled: 'not_acknowledged' });
    expect(clock.slept).toEqual([10]);
    expect(infos).toEqual([{ runId: RUN, waitedMs: 10, msg: "the run's submission was answered 503 while the run waited for the answer; it does not run" }]);
  });

  it('waits no longer than an answer can take (the produce timeout and a grace), then starts the run, warned', async () => {
    const { p, clock, warnings } = progress({ run: async () => ['', '1'] });
    expect(await p.open(RUN)).toEqual({ done: new Map(), cancelled: undefined });
    expect(clock.now - NOW).toBeGreaterThanOrEqual(15_000);
    expect(clock.now - NOW).toBeLessThan(15_000 + 250);
    expect(warnings).toEqual(["the run's submission is still unanswered past the produce timeout; starting it"]);
  });

  it('a Redis failure while waiting for the answer starts the run, as any unreadable progress does', async () => {
    const replies: Array<() => Promise<string[]>> = [async () => ['', '1'], async () => Promise.reject(new Error('ECONNREFUSED'))];
    const { p, warnings } = progress({ run: () => replies.shift()!() });
    expect(await p.open(RUN)).toEqual({ done: new Map(), cancelled: undefined });
    expect(warnings).toHaveLength(1);
  });

  it('records an undefined output as null', async () => {
    const args: unknown[] = [];
    const { p } = progress({ run: async (_name, _keys, a) => (args.push(a[1]), '') });
    expect(await p.record(RUN, 'reply', undefined, NOW)).toBeUndefined();
    expect(args).toEqual(['null']);
  });

  it('goes on through a Redis outage: nothing done, not cancelled, warned', async () => {
    const { p, warnings } = progress({ run: async () => Promise.reject(new Error('ECONNREFUSED')), get: async () => Promise.reject(new Error('ECONNREFUSED')) });
    expect(await p.open(RUN)).toEqual({ done: new Map(), cancelled: undefined });
    expect(await p.record(RUN, 'reply', {}, NOW)).toBeUndefined();
    expect(await p.cancelReason(RUN)).toBeUndefined();
    expect(warnings).toHaveLength(3);
  });

  it('checks the cancellation alone with a GET, and a hanging Redis within the check timeout', async () => {
    const asked: string[] = [];
    expect(await progress({ get: async (key) => (asked.push(key), 'requested') }).p.cancelReason(RUN)).toBe('requested');
    expect(asked).toEqual([keys.cancelRequested(RUN)]);
    const started = Date.now();
    expect(await progress({ get: () => new Promise(() => undefined) }).p.cancelReason(RUN)).toBeUndefined();
    expect(Date.now() - started).toBeLessThan(1_000);
  });
});
