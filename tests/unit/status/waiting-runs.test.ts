import { describe, expect, it } from 'vitest';
import type { RunClass, RunStatus } from '../../../src/events/schemas.js';
import { redisKeys } from '../../../src/redis/keys.js';
import { WaitingRuns, waitingChanges } from '../../../src/status/waiting-runs.js';
import { statusEvent } from '../../support/status-event.js';

const ev = (runId: string, sequence: number, status: RunStatus, runClass: RunClass = 'batch') => statusEvent({ runId, sequence, status, class: runClass });

describe('waitingChanges', () => {
  it('each run\'s latest event by sequence decides: waiting_dependency adds it, anything else removes it', () => {
    const { waiting, moved } = waitingChanges([ev('r1', 1001, 'running'), ev('r1', 1999, 'waiting_dependency'), ev('r2', 1001, 'waiting_dependency'), ev('r2', 1002, 'running'), ev('r3', 1999, 'completed')]);
    expect(waiting.map((e) => e.runId)).toEqual(['r1']);
    expect(moved.map((e) => [e.runId, e.status])).toEqual([
      ['r2', 'running'],
      ['r3', 'completed'],
    ]);
  });

  it('an older event arriving after a newer one does not undo it', () => {
    const { waiting, moved } = waitingChanges([ev('r1', 2001, 'running'), ev('r1', 1999, 'waiting_dependency')]);
    expect(waiting).toEqual([]);
    expect(moved.map((e) => e.sequence)).toEqual([2001]);
  });
});

describe('WaitingRuns', () => {
  const keys = redisKeys('ns.');

  function fakeRedis(replies: [Error | null, unknown][] = []) {
    const commands: unknown[][] = [];
    const p: Record<string, unknown> = {};
    for (const name of ['zrem', 'zadd', 'zremrangebyscore', 'pexpireat', 'zcount']) p[name] = (...args: unknown[]) => (commands.push([name, ...args]), p);
    p.exec = async () => (replies.length > 0 ? replies : commands.map(() => [null, 0]));
    return { redis: { pipeline: () => p } as never, commands };
  }

  it('records a batch in one pipeline: removals, then each waiting run added under a lease past its deadline', async () => {
    const { redis, commands } = fakeRedis();
    await new WaitingRuns(redis, keys, 5_000).record([ev('r1', 1999, 'waiting_dependency'), ev('r2', 1002, 'completed', 'interactive')], 10_000);
    const batchKey = keys.waitingRuns('tenant-a', 'batch');
    expect(commands).toEqual([
      ['zrem', keys.waitingRuns('tenant-a', 'interactive'), 'r2'],
      ['zremrangebyscore', batchKey, '-inf', 10_000],
      ['zadd', batchKey, 65_000, 'r1'],
      ['pexpireat', batchKey, 65_000, 'NX'],
      ['pexpireat', batchKey, 65_000, 'GT'],
    ]);
  });

  it('sends nothing for no events', async () => {
    const { redis, commands } = fakeRedis();
    await new WaitingRuns(redis, keys, 5_000).record([]);
    expect(commands).toEqual([]);
  });

  it('fails when a command of the pipeline failed', async () => {
    const { redis } = fakeRedis([[new Error('OOM'), null]]);
    await expect(new WaitingRuns(redis, keys, 5_000).record([ev('r1', 1999, 'waiting_dependency')])).rejects.toThrow('OOM');
  });

  it('counts live entries per tenant and class', async () => {
    const { redis, commands } = fakeRedis([
      [null, '2'],
      [null, '0'],
    ]);
    const counts = await new WaitingRuns(redis, keys, 5_000).counts(['tenant-a'], ['interactive', 'batch'], 7_000);
    expect(commands).toEqual([
      ['zcount', keys.waitingRuns('tenant-a', 'interactive'), '(7000', '+inf'],
      ['zcount', keys.waitingRuns('tenant-a', 'batch'), '(7000', '+inf'],
    ]);
    expect(counts).toEqual([
      { tenant: 'tenant-a', runClass: 'interactive', runs: 2 },
      { tenant: 'tenant-a', runClass: 'batch', runs: 0 },
    ]);
  });
});
