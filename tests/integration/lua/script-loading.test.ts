import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { redisKeys } from '../../../src/redis/keys.js';
import { LuaScripts, SCRIPTS, type ScriptName, scriptSource } from '../../../src/redis/scripts.js';
import { eventually, testNamespace } from '../harness.js';
import { connectRedis, deleteMatching } from './redis-clients.js';

/**
 * LuaScripts sends each script's source once per connection and then calls it by SHA (EVALSHA);
 * after SCRIPT FLUSH (a restart or failover) the call falls back to EVAL and works. Observed with
 * MONITOR, filtered to this test's own connection so other users of the server do not matter.
 * SCRIPT FLUSH clears the whole server's cache, which is harmless: every ioredis client reloads.
 */
const ns = testNamespace('lua-sha');
const keys = redisKeys(ns);
const opened: Redis[] = [];
const connect = () => {
  const r = new Redis(inject('infra').redisUrl, { maxRetriesPerRequest: 1, connectTimeout: 5_000, commandTimeout: 5_000 });
  opened.push(r);
  return r;
};
const sha1 = (text: string) => createHash('sha1').update(text).digest('hex');

interface Seen {
  command: string;
  first: string;
}

/** Records the commands one client sends, as the server saw them. */
async function watch(client: Redis): Promise<{ seen: Seen[]; stop: () => Promise<void> }> {
  const info = String(await client.call('CLIENT', 'INFO'));
  const addr = /(?:^|\s)addr=(\S+)/.exec(info)?.[1];
  if (!addr) throw new Error(`no addr in CLIENT INFO: ${info}`);
  const monitor = await connect().monitor();
  const seen: Seen[] = [];
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (source === addr) seen.push({ command: String(args[0]).toLowerCase(), first: String(args[1]) });
  });
  return { seen, stop: async () => void (await monitor.disconnect()) };
}

/** Calls every script once, with the keys the stores build (keys.ts), so each is loaded and has run. */
async function runEveryScript(scripts: LuaScripts): Promise<void> {
  await scripts.run('tokenBucketTake', [keys.tenantBucket('all')], [10, 1, 1]);
  await scripts.run('tokenBucketSettle', [keys.tokenBudget('all'), keys.tokenReservationReturned('all', 'r1')], [10, 1, 1, 2, Date.now() + 60_000]);
  await scripts.run('tokenEstimateFold', [keys.tokenEstimate('wf')], [10, 0.2, 60_000]);
  await scripts.run('backlogAdmit', [keys.backlogTenant('t'), keys.backlogClass('batch'), keys.backlogAll()], ['r1', Date.now() + 60_000, 10, 10, -1, 0, 'none']);
  await scripts.run('backlogRelease', [keys.backlogTenant('t'), keys.backlogClass('batch'), keys.backlogAll(), keys.serviceStats('batch')], ['r1', 5, 10, 361, 0.1, 1]);
  await scripts.run('idempotencyClaim', [keys.idempotency('t', 'k')], ['h', 'tok', 10_000]);
  await scripts.run('idempotencySettle', [keys.idempotency('t', 'k')], ['tok', 'forget', 0, '', 0]);
  await scripts.run('idempotencyAnswer', [keys.idempotency('t', 'k')], []);
  const permitKeys = [keys.permitScope('global'), keys.permitScope('tenant:t')];
  await scripts.run('permitsAcquire', [...permitKeys, keys.permitLimits()], ['tok', 10_000, 0, '', '', 0, 'global', 1, 1, 0, 0, 0, 'tenant:t', 1, 1, 0, 0, 0]);
  await scripts.run('permitsRenew', permitKeys, ['tok', 10_000]);
  await scripts.run('adaptiveLimitUpdate', [keys.adaptiveLimit('d')], ['success', 1, 10, 0.7, 1_000, 60_000]);
  await scripts.run('permitsRelease', permitKeys, ['tok', keys.permitReleased(), 'global', 'tenant:t']);
  await scripts.run('breakerAdmit', [keys.breaker('d'), keys.breakerProbes('d'), keys.breakerForced('d')], ['tok', 1, 1_000, 2_000, keys.breakerChanged('d'), 'd']);
  await scripts.run('breakerRecord', [keys.breaker('d'), keys.breakerWindow('d'), keys.breakerProbes('d'), keys.breakerForced('d')], ['', 'success', 1, 1_000, 5, 5, 0.5, 1_000, 1, 1_000, 1, 2_000, keys.breakerChanged('d'), 'd']);
  await scripts.run('breakerTally', [keys.breaker('d'), keys.breakerWindow('d'), keys.breakerForced('d')], [1, 1_000]);
  await scripts.run('breakerForce', [keys.breakerForced('d')], ['none', 0, keys.breakerChanged('d'), 'd']);
  await scripts.run('retryBudgetTake', [keys.retryBudget('d')], [1, 1, 0.1, 10_000, 10, 1]);
  await scripts.run('pacingReserve', [keys.paceState('d'), keys.paceObserved('d'), keys.paceNotBefore('d'), keys.paceTenants('d')], [1_000, 0, 1_000, 1, 0, 'tenant-a', 1, 1, 0.2, 5_000, 'requests', 60, 1]);
  await scripts.run('pacingSettle', [keys.paceState('d'), keys.paceTenants('d')], [1_000, 'tenant-a', 'requests', 0]);
  await scripts.run('pacingObserve', [keys.paceObserved('d'), keys.paceNotBefore('d')], [1_000, 0, 'requests', 60, 0]);
  await scripts.run('runProgressOpen', [keys.runSteps('r1'), keys.cancelRequested('r1'), keys.answerPending('r1')], []);
  await scripts.run('runProgressRecord', [keys.runSteps('r1'), keys.cancelRequested('r1')], ['step', '{}', 10_000]);
  await scripts.run('runProgressCalls', [keys.runCalls('r1')], [10_000, 'anthropic', 1]);
  await scripts.run('runProgressEnd', [keys.runCalls('r1')], [10_000, 1, 'anthropic', 1]);
  await scripts.run('processorStatePublish', [keys.processorState()], ['p1', 10_000, '{}', 'global', 5]);
}

let r: Redis;
let scripts: LuaScripts;

beforeAll(async () => {
  r = connect();
  await r.ping();
  scripts = new LuaScripts(r);
});

afterAll(async () => {
  if (r) {
    const found: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await r.scan(cursor, 'MATCH', `*${ns}*`, 'COUNT', 1000);
      cursor = next;
      found.push(...batch);
    } while (cursor !== '0');
    if (found.length > 0) await r.del(...found);
  }
  for (const c of opened) c.disconnect();
});

describe('LuaScripts', () => {
  it('sends the source once, then calls by SHA', async () => {
    const sha = sha1(scriptSource('tokenBucketTake'));
    const client = connect();
    const s = new LuaScripts(client);
    const w = await watch(client);
    try {
      for (let i = 0; i < 5; i++) await s.run('tokenBucketTake', [keys.tenantBucket('sha')], [10, 1, 1]);
      const seen = await eventually(async () => (w.seen.length >= 5 ? w.seen : undefined), 3_000, 'MONITOR to show five script calls', 20);
      expect(seen.map((c) => c.command)).toEqual(['eval', 'evalsha', 'evalsha', 'evalsha', 'evalsha']);
      // MONITOR shows the source escaped: compare its first line
      expect(seen[0]!.first.startsWith(scriptSource('tokenBucketTake').split('\n')[0]!)).toBe(true);
      for (const c of seen.slice(1)) expect(c.first).toBe(sha);
    } finally {
      await w.stop();
    }
    expect(await client.script('EXISTS', sha)).toEqual([1]);
  });

  it('leaves every script in the server cache under the SHA-1 of its source (shared Lua in front) after first use', async () => {
    await runEveryScript(scripts);
    const shas = (Object.keys(SCRIPTS) as ScriptName[]).map((name) => sha1(scriptSource(name)));
    expect(new Set(shas).size).toBe(shas.length);
    expect(await r.script('EXISTS', ...shas)).toEqual(shas.map(() => 1));
  });

  it('still works after SCRIPT FLUSH: NOSCRIPT → EVAL with the source, then EVALSHA again', async () => {
    const sha = sha1(scriptSource('idempotencyClaim'));
    const client = connect();
    const s = new LuaScripts(client);
    const key = keys.idempotency('t', 'flush');
    expect(await s.run('idempotencyClaim', [key], ['h', 'tok', 10_000])).toEqual(['claimed']); // loaded on this socket
    const w = await watch(client);
    try {
      // flush and call back to back on one connection, so nobody reloads the script in between
      const [flushed, afterFlush] = await Promise.all([client.script('FLUSH'), s.run('idempotencyClaim', [key], ['h', 'tok2', 10_000])]);
      expect(flushed).toBe('OK');
      expect(afterFlush).toEqual(['pending']);
      expect(await s.run('idempotencyClaim', [key], ['other', 'tok3', 10_000])).toEqual(['conflict']);
      const seen = await eventually(async () => (w.seen.filter((c) => c.command.startsWith('eval')).length >= 3 ? w.seen : undefined), 3_000, 'MONITOR to show the fallback', 20);
      const calls = seen.filter((c) => c.command.startsWith('eval')).map((c) => c.command);
      // the SHA is refused (NOSCRIPT), the source is sent once, then the SHA works again
      expect(calls).toEqual(['evalsha', 'eval', 'evalsha']);
      expect(seen.find((c) => c.command === 'eval')!.first.startsWith(scriptSource('idempotencyClaim').split('\n')[0]!)).toBe(true);
      expect(seen.filter((c) => c.command === 'evalsha').every((c) => c.first === sha)).toBe(true);
    } finally {
      await w.stop();
    }
    expect(await client.script('EXISTS', sha)).toEqual([1]);
  });

  it('defines the commands once per client and checks the number of keys', async () => {
    const again = new LuaScripts(r);
    expect(await again.run('tokenBucketTake', [keys.tenantBucket('twice')], [3, 1, 1])).toEqual([1, '2', 0]);
    await expect(scripts.run('tokenBucketTake', [], [3, 1, 1])).rejects.toThrow('tokenBucketTake takes 1 keys, got 0');
    await expect(scripts.run('backlogRelease', ['a', 'b', 'c'], [])).rejects.toThrow('backlogRelease takes 4 keys, got 3');
    // a script taking any number of keys gets the count from the call
    expect(await again.run('permitsRelease', [keys.permitScope('a'), keys.permitScope('b'), keys.permitScope('c')], ['nobody', keys.permitReleased(), 'a', 'b', 'c'])).toBe(0);
  });
});

/**
 * The same calls on a Redis Cluster: every script's keys in one slot and the announcements
 * (SPUBLISH from inside the scripts) on channels of that slot, or the cluster refuses them. The
 * SHA and MONITOR checks above stay on one server: MONITOR and CLIENT INFO see one node's connections.
 */
describe('LuaScripts on a Redis Cluster', () => {
  it('runs every script with the keys keys.ts builds', async () => {
    const cluster = connectRedis('cluster');
    try {
      await runEveryScript(new LuaScripts(cluster));
      const owners = new Set(await Promise.all([keys.permitScope('global'), keys.tenantBucket('all'), keys.breaker('d'), keys.backlogAll()].map(async (k) => cluster.cluster('KEYSLOT', k))));
      // The calls reached more than one slot, so more than one node of the three.
      expect(owners.size).toBeGreaterThan(1);
    } finally {
      await deleteMatching(cluster, `*${ns}*`);
      await cluster.quit();
    }
  });
});
