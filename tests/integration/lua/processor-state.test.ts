import type { RedisClient } from '../../../src/redis/client.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HeldCount } from '../../../src/processors/breaker-holds.js';
import type { PausedPartition, ProcessorState } from '../../../src/processors/processor-state.js';
import { ProcessorStateStore } from '../../../src/processors/processor-state-store.js';
import { redisKeys, type RedisKeys } from '../../../src/redis/keys.js';
import type { LuaScripts } from '../../../src/redis/scripts.js';
import { testNamespace } from '../harness.js';
import { closeScriptPair, openScriptPair, REDIS_BACKENDS } from './redis-clients.js';

/**
 * processor-state-publish.lua against a real Redis, through ProcessorStateStore: two connections
 * stand in for two processors publishing, and the console reading. Each test has its own namespace.
 */
const base = testNamespace('lua-processor-state');
let a: RedisClient;
let b: RedisClient;
let scriptsA: LuaScripts;
let scriptsB: LuaScripts;
let n = 0;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function fresh(): { keys: RedisKeys; A: ProcessorStateStore; B: ProcessorStateStore } {
  const keys = redisKeys(`${base}${++n}.`);
  return { keys, A: new ProcessorStateStore(scriptsA, a, keys), B: new ProcessorStateStore(scriptsB, b, keys) };
}

/** Waiters started `waitedMs` before `now` on the publisher's clock, and what else the processor has. */
const state = (now: number, waited: Record<string, number>, rest: { paused?: PausedPartition[]; held?: HeldCount[] } = {}): ProcessorState => ({
  oldest: new Map(Object.entries(waited).map(([scope, ms]) => [scope, now - ms])),
  paused: rest.paused ?? [],
  held: rest.held ?? [],
});
const ages = async (store: ProcessorStateStore) => (await store.read()).oldestWaitingSec;

describe.each(REDIS_BACKENDS)('on %s', (backend) => {
  beforeAll(async () => ({ a, b, scriptsA, scriptsB } = await openScriptPair(backend)));
  afterAll(() => closeScriptPair(a, b, `*${base}*`));

  it('reads, per scope, the longest wait across every processor', async () => {
    const { A, B } = fresh();
    const now = Date.now();
    expect(await A.publish('p1', state(now, { global: 4_000, 'tenant:a': 4_000, 'workflow:w': 1_000 }), now)).toBe(1);
    expect(await B.publish('p2', state(now, { global: 9_000, 'dependency:llm': 2_000 }), now)).toBe(2);
    const read = Object.fromEntries(await ages(B));
    expect(Object.keys(read).sort()).toEqual(['dependency:llm', 'global', 'tenant:a', 'workflow:w']);
    // Read a moment after publishing: each wait has grown by that moment, never shrunk.
    for (const [scope, sec] of Object.entries({ global: 9, 'tenant:a': 4, 'workflow:w': 1, 'dependency:llm': 2 })) {
      expect(read[scope]).toBeGreaterThanOrEqual(sec);
      expect(read[scope]).toBeLessThan(sec + 1);
    }
  });

  it("merges every processor's paused partitions and held runs, with or without waiters", async () => {
    const { A, B } = fresh();
    const now = Date.now();
    const held = (dependency: string, tenant: string, runs: number): HeldCount => ({ dependency, tenant, runClass: 'batch', runs });
    await A.publish('p1', state(now, {}, { paused: [{ topic: 'runs.batch', partition: 1, reason: 'breaker_open' }, { topic: 'runs.batch', partition: 0, reason: 'breaker_open' }], held: [held('llm', 'a', 3)] }), now);
    await B.publish('p2', state(now, { global: 1_000 }, { paused: [{ topic: 'runs.interactive', partition: 2, reason: 'buffer_full' }], held: [held('llm', 'b', 1), held('kb', 'a', 2)] }), now);
    const read = await A.read();
    expect(read.paused).toEqual([
      { reason: 'breaker_open', partitions: 2, processors: 1, topics: [{ topic: 'runs.batch', partitions: [0, 1] }], unlisted: 0 },
      { reason: 'buffer_full', partitions: 1, processors: 1, topics: [{ topic: 'runs.interactive', partitions: [2] }], unlisted: 0 },
    ]);
    expect(read.held).toEqual([
      { dependency: 'kb', runs: 2, tenants: { a: 2 } },
      { dependency: 'llm', runs: 4, tenants: { a: 3, b: 1 } },
    ]);
    expect([...read.oldestWaitingSec.keys()]).toEqual(['global']);
  });

  it('keeps at most 256 paused partitions named per processor, and counts the rest', async () => {
    const { A } = fresh();
    const now = Date.now();
    const paused = Array.from({ length: 300 }, (_, partition): PausedPartition => ({ topic: 'runs.batch', partition, reason: 'buffer_full' }));
    await A.publish('p1', state(now, {}, { paused }), now);
    const [p] = (await A.read()).paused;
    expect(p).toMatchObject({ reason: 'buffer_full', partitions: 300, processors: 1, unlisted: 44 });
    expect(p!.topics[0]!.partitions).toEqual(Array.from({ length: 256 }, (_, i) => i));
  });

  it("measures waits on Redis's clock: a publisher whose clock is an hour off still reads right", async () => {
    const { A } = fresh();
    const skewed = Date.now() + 3_600_000;
    await A.publish('p1', state(skewed, { global: 5_000 }), skewed);
    const global = (await ages(A)).get('global')!;
    expect(global).toBeGreaterThanOrEqual(5);
    expect(global).toBeLessThan(6);
  });

  it("replaces a processor's entry on each publication, and removes it on an empty one", async () => {
    const { keys, A } = fresh();
    const now = Date.now();
    await A.publish('p1', state(now, { global: 9_000, 'tenant:a': 9_000 }, { paused: [{ topic: 't', partition: 0, reason: 'buffer_full' }] }), now);
    await A.publish('p1', state(now, { global: 1_000 }), now);
    const read = await A.read();
    expect([...read.oldestWaitingSec.keys()]).toEqual(['global']);
    expect(read.oldestWaitingSec.get('global')).toBeLessThan(2);
    expect(read.paused).toEqual([]);
    expect(await A.publish('p1', state(now, {}), now)).toBe(0);
    expect(await A.read()).toEqual({ oldestWaitingSec: new Map(), paused: [], held: [] });
    // Its last entry gone, so is the hash.
    expect(await a.exists(keys.processorState())).toBe(0);
  });

  it('stops counting a processor that stopped publishing once its entry lapses, and the next publication drops it', async () => {
    const { keys, A, B } = fresh();
    const now = Date.now();
    const deadHeld: HeldCount = { dependency: 'llm', tenant: 'a', runClass: 'batch', runs: 5 };
    await A.publish('dead', state(now, { global: 60_000 }, { paused: [{ topic: 't', partition: 0, reason: 'breaker_open' }], held: [deadHeld] }), now, 300);
    await B.publish('live', state(now, { global: 1_000 }), now, 10_000);
    const before = await B.read();
    expect(before.oldestWaitingSec.get('global')).toBeGreaterThanOrEqual(60);
    expect(before.paused).toHaveLength(1);
    expect(before.held).toHaveLength(1);
    await sleep(400);
    const after = await B.read();
    expect(after.oldestWaitingSec.get('global')).toBeLessThan(2);
    expect(after.paused).toEqual([]);
    expect(after.held).toEqual([]);
    expect(await b.hexists(keys.processorState(), 'dead')).toBe(1);
    await B.publish('live', state(Date.now(), { global: 1_000 }), Date.now(), 10_000);
    expect(await b.hkeys(keys.processorState())).toEqual(['live']);
  });

  it('expires the hash with its latest-lapsing entry, so nothing is left once every processor is gone', async () => {
    const { keys, A, B } = fresh();
    const now = Date.now();
    await B.publish('long', state(now, {}, { paused: [{ topic: 't', partition: 0, reason: 'buffer_full' }] }), now, 600);
    await A.publish('short', state(now, { global: 1_000 }), now, 200);
    // The shorter entry published later does not cut the hash's life short.
    const ttl = await a.pttl(keys.processorState());
    expect(ttl).toBeGreaterThan(200);
    expect(ttl).toBeLessThanOrEqual(600);
    await sleep(700);
    expect(await a.exists(keys.processorState())).toBe(0);
    expect((await A.read()).paused).toEqual([]);
  });

  it('drops an unreadable entry at the next publication, and reads past it until then', async () => {
    const { keys, A } = fresh();
    await a.hset(keys.processorState(), 'junk', 'not json');
    expect((await ages(A)).size).toBe(0);
    const now = Date.now();
    expect(await A.publish('p1', state(now, { global: 1_000 }), now)).toBe(1);
    expect(await a.hkeys(keys.processorState())).toEqual(['p1']);
  });

  it('keeps scope, topic, dependency and tenant names as they are, whatever they hold', async () => {
    const { A } = fresh();
    const now = Date.now();
    const odd = ['tenant:with "quotes" and \\ slashes', 'workflow:ünïcødé', 'dependency:1'];
    await A.publish(
      'p1',
      state(now, Object.fromEntries(odd.map((s) => [s, 1_000])), { paused: [{ topic: 'a/b "c"', partition: 0, reason: 'buffer_full' }], held: [{ dependency: '1', tenant: 'ü "x"', runClass: 'batch', runs: 1 }] }),
      now,
    );
    const read = await A.read();
    expect([...read.oldestWaitingSec.keys()].sort()).toEqual([...odd].sort());
    expect(read.paused[0]!.topics).toEqual([{ topic: 'a/b "c"', partitions: [0] }]);
    expect(read.held).toEqual([{ dependency: '1', runs: 1, tenants: { 'ü "x"': 1 } }]);
  });
});
