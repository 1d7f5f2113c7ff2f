import { describe, expect, it } from 'vitest';
import { countBacklog, readBacklog } from '../../../src/admission/backlog-census.js';
import { redisKeys } from '../../../src/redis/keys.js';
import { newRunId } from '../../../src/runs/run-id.js';

const id = (admittedAt: number) => newRunId(admittedAt);

describe('countBacklog', () => {
  it('counts each tenant\'s live runs by class, with the oldest admission time read from the run ids', () => {
    const [a1, a2, a3, b1] = [id(5_000), id(2_000), id(9_000), id(7_000)];
    const counts = countBacklog(
      new Map([
        ['a', [a1, a2, a3]],
        ['b', [b1]],
      ]),
      new Map([
        ['interactive', new Set([a1, a3])],
        ['batch', new Set([a2, b1])],
      ]),
    );
    expect(counts).toEqual([
      { tenant: 'a', runClass: 'interactive', runs: 2, oldestAdmittedAt: 5_000 },
      { tenant: 'a', runClass: 'batch', runs: 1, oldestAdmittedAt: 2_000 },
      { tenant: 'b', runClass: 'interactive', runs: 0, oldestAdmittedAt: undefined },
      { tenant: 'b', runClass: 'batch', runs: 1, oldestAdmittedAt: 7_000 },
    ]);
  });

  it('leaves out a run whose class entry has lapsed, and one whose id carries no time from the oldest', () => {
    const live = id(3_000);
    const counts = countBacklog(new Map([['a', [live, id(1_000), 'not-a-uuid']]]), new Map([['interactive', new Set([live, 'not-a-uuid'])]]));
    expect(counts[0]).toEqual({ tenant: 'a', runClass: 'interactive', runs: 2, oldestAdmittedAt: 3_000 });
    expect(counts[1]).toEqual({ tenant: 'a', runClass: 'batch', runs: 0, oldestAdmittedAt: undefined });
  });
});

describe('readBacklog', () => {
  it('reads the live members of every tenant and class zset in one pipeline', async () => {
    const keys = redisKeys('ns.');
    const asked: string[][] = [];
    const members: Record<string, string[]> = { [keys.backlogTenant('a')]: [id(1_000)], [keys.backlogClass('batch')]: [] };
    const redis = {
      pipeline: () => {
        const p = {
          zrangebyscore: (...args: string[]) => (asked.push(args), p),
          exec: async () => asked.map(([key]) => [null, members[key!] ?? []]),
        };
        return p;
      },
    };
    const counts = await readBacklog(redis as never, keys, ['a'], 50_000);
    expect(asked).toEqual([
      [keys.backlogTenant('a'), '(50000', '+inf'],
      [keys.backlogClass('interactive'), '(50000', '+inf'],
      [keys.backlogClass('batch'), '(50000', '+inf'],
    ]);
    expect(counts.map((c) => c.runs)).toEqual([0, 0]);
  });
});
