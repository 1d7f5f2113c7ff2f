import { describe, expect, it } from 'vitest';
import { KafkaProbe, type ProbeAdmin } from '../../../src/kafka/kafka-probe.js';

/** An admin client stand-in counting its calls; `answer` settles the describeCluster in flight. */
function fakeAdmin() {
  const calls = { created: 0, connect: 0, describe: 0, disconnect: 0 };
  let answer: ((err?: Error) => void) | undefined;
  const admin: ProbeAdmin = {
    connect: async () => void calls.connect++,
    describeCluster: () => {
      calls.describe++;
      return new Promise((resolve, reject) => {
        answer = (err) => (err ? reject(err) : resolve({ brokers: [], controller: 1, clusterId: 'c' }));
      });
    },
    disconnect: async () => void calls.disconnect++,
  };
  const create = () => {
    calls.created++;
    return admin;
  };
  const settle = async (err?: Error) => {
    while (!answer) await new Promise((r) => setImmediate(r));
    const a = answer;
    answer = undefined;
    a(err);
  };
  return { calls, create, settle };
}

describe('KafkaProbe', () => {
  it('keeps one admin client for every check instead of opening one per request', async () => {
    const f = fakeAdmin();
    const probe = new KafkaProbe(f.create);
    for (let i = 0; i < 5; i++) {
      const check = probe.check();
      await f.settle();
      await check;
    }
    expect(f.calls).toEqual({ created: 1, connect: 5, describe: 5, disconnect: 0 });
  });

  it('has at most one probe in flight: concurrent callers share it', async () => {
    const f = fakeAdmin();
    const probe = new KafkaProbe(f.create);
    const checks = Array.from({ length: 100 }, () => probe.check());
    await f.settle();
    await Promise.all(checks);
    expect(f.calls.describe).toBe(1);
  });

  it('reports a failure to every waiting caller, and probes again on the next check', async () => {
    const f = fakeAdmin();
    const probe = new KafkaProbe(f.create);
    const checks = [probe.check(), probe.check()];
    await f.settle(new Error('Connection error: connect ECONNREFUSED'));
    for (const c of checks) await expect(c).rejects.toThrow('ECONNREFUSED');
    const again = probe.check();
    await f.settle();
    await again;
    expect(f.calls).toMatchObject({ created: 1, describe: 2 });
  });

  it('disconnects its client on close, and does nothing if it never probed', async () => {
    const unused = fakeAdmin();
    await new KafkaProbe(unused.create).close();
    expect(unused.calls.created).toBe(0);

    const f = fakeAdmin();
    const probe = new KafkaProbe(f.create);
    const check = probe.check();
    await f.settle();
    await check;
    await probe.close();
    expect(f.calls.disconnect).toBe(1);
  });
});
