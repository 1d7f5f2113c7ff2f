import type { RedisClient } from '../../../src/redis/client.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OldestWaitersStore } from '../../../src/permits/oldest-waiters-store.js';
import { redisKeys, type RedisKeys } from '../../../src/redis/keys.js';
import type { LuaScripts } from '../../../src/redis/scripts.js';
import { testNamespace } from '../harness.js';
import { closeScriptPair, openScriptPair, REDIS_BACKENDS } from './redis-clients.js';

/**
 * oldest-waiters-publish.lua against a real Redis, through OldestWaitersStore: two connections
 * stand in for two processors publishing, and the console reading. Each test has its own namespace.
 */
const base = testNamespace('lua-oldest-waiters');
let a: RedisClient;
let b: RedisClient;
let scriptsA: LuaScripts;
let scriptsB: LuaScripts;
let n = 0;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function fresh(): { keys: RedisKeys; A: OldestWaitersStore; B: OldestWaitersStore } {
  const keys = redisKeys(`${base}${++n}.`);
  return { keys, A: new OldestWaitersStore(scriptsA, a, keys), B: new OldestWaitersStore(scriptsB, b, keys) };
}

/** Started `waitedMs` before `now` on the publisher's clock. */
const waited = (now: number, entries: Record<string, number>) => new Map(Object.entries(entries).map(([scope, ms]) => [scope, now - ms]));

describe.each(REDIS_BACKENDS)('on %s', (backend) => {
  beforeAll(async () => ({ a, b, scriptsA, scriptsB } = await openScriptPair(backend)));
  afterAll(() => closeScriptPair(a, b, `*${base}*`));

  it('reads, per scope, the longest wait across every processor', async () => {
    const { A, B } = fresh();
    const now = Date.now();
    expect(await A.publish('p1', waited(now, { global: 4_000, 'tenant:a': 4_000, 'workflow:w': 1_000 }), now)).toBe(1);
    expect(await B.publish('p2', waited(now, { global: 9_000, 'dependency:llm': 2_000 }), now)).toBe(2);
    const ages = Object.fromEntries(await B.read());
    expect(Object.keys(ages).sort()).toEqual(['dependency:llm', 'global', 'tenant:a', 'workflow:w']);
    // Read a moment after publishing: each wait has grown by that moment, never shrunk.
    for (const [scope, sec] of Object.entries({ global: 9, 'tenant:a': 4, 'workflow:w': 1, 'dependency:llm': 2 })) {
      expect(ages[scope]).toBeGreaterThanOrEqual(sec);
      expect(ages[scope]).toBeLessThan(sec + 1);
    }
  });

  it("measures waits on Redis's clock: a publisher whose clock is an hour off still reads right", async () => {
    const { A } = fresh();
    const skewed = Date.now() + 3_600_000;
    await A.publish('p1', waited(skewed, { global: 5_000 }), skewed);
    const global = (await A.read()).get('global')!;
    expect(global).toBeGreaterThanOrEqual(5);
    expect(global).toBeLessThan(6);
  });

  it('replaces a processor\'s entry on each publication, and removes it on an empty one', async () => {
    const { keys, A } = fresh();
    const now = Date.now();
    await A.publish('p1', waited(now, { global: 9_000, 'tenant:a': 9_000 }), now);
    await A.publish('p1', waited(now, { global: 1_000 }), now);
    const ages = await A.read();
    expect([...ages.keys()]).toEqual(['global']);
    expect(ages.get('global')).toBeLessThan(2);
    expect(await A.publish('p1', new Map(), now)).toBe(0);
    expect((await A.read()).size).toBe(0);
    // Its last entry gone, so is the hash.
    expect(await a.exists(keys.oldestWaiters())).toBe(0);
  });

  it("stops counting a processor that stopped publishing once its entry lapses, and the next publication drops it", async () => {
    const { keys, A, B } = fresh();
    const now = Date.now();
    await A.publish('dead', waited(now, { global: 60_000 }), now, 300);
    await B.publish('live', waited(now, { global: 1_000 }), now, 10_000);
    expect((await B.read()).get('global')).toBeGreaterThanOrEqual(60);
    await sleep(400);
    expect((await B.read()).get('global')).toBeLessThan(2);
    expect(await b.hexists(keys.oldestWaiters(), 'dead')).toBe(1);
    await B.publish('live', waited(Date.now(), { global: 1_000 }), Date.now(), 10_000);
    expect(await b.hkeys(keys.oldestWaiters())).toEqual(['live']);
  });

  it('expires the hash with its latest-lapsing entry, so nothing is left once every processor is gone', async () => {
    const { keys, A, B } = fresh();
    const now = Date.now();
    await B.publish('long', waited(now, { global: 1_000 }), now, 600);
    await A.publish('short', waited(now, { global: 1_000 }), now, 200);
    // The shorter entry published later does not cut the hash's life short.
    const ttl = await a.pttl(keys.oldestWaiters());
    expect(ttl).toBeGreaterThan(200);
    expect(ttl).toBeLessThanOrEqual(600);
    await sleep(700);
    expect(await a.exists(keys.oldestWaiters())).toBe(0);
    expect((await A.read()).size).toBe(0);
  });

  it('drops an unreadable entry at the next publication, and reads past it until then', async () => {
    const { keys, A } = fresh();
    await a.hset(keys.oldestWaiters(), 'junk', 'not json');
    expect((await A.read()).size).toBe(0);
    const now = Date.now();
    expect(await A.publish('p1', waited(now, { global: 1_000 }), now)).toBe(1);
    expect(await a.hkeys(keys.oldestWaiters())).toEqual(['p1']);
  });

  it('keeps scope names as they are, whatever they hold', async () => {
    const { A } = fresh();
    const now = Date.now();
    const odd = ['tenant:with "quotes" and \\ slashes', 'workflow:ünïcødé', 'dependency:1'];
    await A.publish('p1', waited(now, Object.fromEntries(odd.map((s) => [s, 1_000]))), now);
    expect([...(await A.read()).keys()].sort()).toEqual([...odd].sort());
  });
});
