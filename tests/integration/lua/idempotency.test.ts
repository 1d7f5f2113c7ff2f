import { createHash } from 'node:crypto';
import type { RedisClient } from '../../../src/redis/client.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdempotencyStore, requestFingerprint, type IdempotencyOptions, type StoredAnswer } from '../../../src/admission/idempotency.js';
import { redisKeys } from '../../../src/redis/keys.js';
import { canonicalJson } from '../../../src/util/canonical-json.js';
import { LuaScripts } from '../../../src/redis/scripts.js';
import { eventually, testNamespace } from '../harness.js';
import { closeScriptPair, openScriptPair, REDIS_BACKENDS } from './redis-clients.js';

/**
 * idempotency-claim.lua, idempotency-settle.lua and idempotency-answer.lua against a real Redis, raw and through
 * IdempotencyStore. Two connections stand in for two API instances racing on one key.
 */
const ns = testNamespace('lua-idem');
const keys = redisKeys(ns);
let a: RedisClient;
let b: RedisClient;
let scriptsA: LuaScripts;
let scriptsB: LuaScripts;
let n = 0;
const uniq = (label: string) => `${label}-${++n}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const digest = (key: string) => createHash('sha256').update(key).digest('hex');

const opts: IdempotencyOptions = { ttlSec: 86_400, pendingMs: 30_000, waitMs: 2_000, pollMs: 20 };
const answer = (runId: string): StoredAnswer => ({ status: 202, headers: { Location: `/v1/runs/${runId}` }, body: { runId, status: 'queued', admission: 'admitted' } });

const claim = (s: LuaScripts, key: string, hash: string, token: string, leaseMs = 30_000) => s.run('idempotencyClaim', [key], [hash, token, leaseMs]);
const settle = (s: LuaScripts, key: string, token: string, how: 'store' | 'forget', status = 202, body = '{}', keepMs = 60_000) =>
  s.run('idempotencySettle', [key], [token, how, status, body, keepMs]);

describe.each(REDIS_BACKENDS)('on %s', (backend) => {
  beforeAll(async () => ({ a, b, scriptsA, scriptsB } = await openScriptPair(backend)));
  afterAll(() => closeScriptPair(a, b, `*${ns}*`));

  describe('idempotency-claim.lua / idempotency-settle.lua', () => {
    it('claims a free key: pending, with the request hash and token, leased for pendingMs', async () => {
      const key = keys.idempotency('acme', uniq('k'));
      expect(await claim(scriptsA, key, 'h1', 'tok-a', 5_000)).toEqual(['claimed']);
      expect(await a.hgetall(key)).toEqual({ state: 'pending', hash: 'h1', token: 'tok-a' });
      const pttl = await a.pttl(key);
      expect(pttl).toBeGreaterThan(4_000);
      expect(pttl).toBeLessThanOrEqual(5_000);
    });

    it('answers pending to the same request while the claim is open, and conflict to another request', async () => {
      const key = keys.idempotency('acme', uniq('k'));
      await claim(scriptsA, key, 'h1', 'tok-a');
      expect(await claim(scriptsB, key, 'h1', 'tok-b')).toEqual(['pending']);
      expect(await claim(scriptsB, key, 'h2', 'tok-c')).toEqual(['conflict']);
      // neither took the claim over
      expect(await a.hget(key, 'token')).toBe('tok-a');
    });

    it('claims again for its own token while pending, renewing the lease: a claimant retrying after a reply it never got', async () => {
      const key = keys.idempotency('acme', uniq('k'));
      expect(await claim(scriptsA, key, 'h1', 'tok-a', 1_000)).toEqual(['claimed']);
      expect(await claim(scriptsB, key, 'h1', 'tok-a', 5_000)).toEqual(['claimed']);
      expect(await a.pttl(key)).toBeGreaterThan(1_000);
      expect(await claim(scriptsB, key, 'h1', 'tok-b')).toEqual(['pending']);
      expect(await claim(scriptsB, key, 'h2', 'tok-a')).toEqual(['conflict']);
    });

    it('replays a stored answer, kept for the given time; another request is still a conflict', async () => {
      const key = keys.idempotency('acme', uniq('k'));
      await claim(scriptsA, key, 'h1', 'tok-a');
      expect(await settle(scriptsA, key, 'tok-a', 'store', 202, '{"runId":"r1"}', 90_000)).toBe(1);
      expect(await claim(scriptsB, key, 'h1', 'tok-b')).toEqual(['done', '202', '{"runId":"r1"}']);
      expect(await claim(scriptsB, key, 'h2', 'tok-c')).toEqual(['conflict']);
      const pttl = await a.pttl(key);
      expect(pttl).toBeGreaterThan(89_000);
      expect(pttl).toBeLessThanOrEqual(90_000);
    });

    it('is fenced: a different token can neither store nor forget', async () => {
      const key = keys.idempotency('acme', uniq('k'));
      await claim(scriptsA, key, 'h1', 'tok-a');
      expect(await settle(scriptsB, key, 'tok-b', 'store', 500, 'stolen')).toBe(0);
      expect(await settle(scriptsB, key, 'tok-b', 'forget')).toBe(0);
      expect(await a.hgetall(key)).toEqual({ state: 'pending', hash: 'h1', token: 'tok-a' });
      expect(await claim(scriptsB, key, 'h1', 'tok-b')).toEqual(['pending']);
      // after the answer is stored, the fence still holds
      await settle(scriptsA, key, 'tok-a', 'store', 202, 'mine');
      expect(await settle(scriptsB, key, 'tok-b', 'forget')).toBe(0);
      expect(await claim(scriptsB, key, 'h1', 'tok-b')).toEqual(['done', '202', 'mine']);
    });

    it('settling a key nobody holds does nothing', async () => {
      const key = keys.idempotency('acme', uniq('k'));
      expect(await settle(scriptsA, key, 'tok-a', 'store')).toBe(0);
      expect(await settle(scriptsA, key, 'tok-a', 'forget')).toBe(0);
      expect(await a.exists(key)).toBe(0);
    });

    it('forget frees the key for the next request, even a different one', async () => {
      const key = keys.idempotency('acme', uniq('k'));
      await claim(scriptsA, key, 'h1', 'tok-a');
      expect(await settle(scriptsA, key, 'tok-a', 'forget')).toBe(1);
      expect(await a.exists(key)).toBe(0);
      expect(await claim(scriptsB, key, 'h2', 'tok-b')).toEqual(['claimed']);
    });

    it('a pending claim expires after its lease and can be claimed again; the old claimant is then fenced out', async () => {
      const key = keys.idempotency('acme', uniq('k'));
      await claim(scriptsA, key, 'h1', 'tok-a', 100);
      expect(await claim(scriptsB, key, 'h1', 'tok-b', 100)).toEqual(['pending']);
      const taken = await eventually(async () => {
        const r = (await claim(scriptsB, key, 'h1', 'tok-b', 30_000)) as string[];
        return r[0] === 'claimed' ? r : undefined;
      }, 2_000, 'the lease to expire', 20);
      expect(taken).toEqual(['claimed']);
      expect(await settle(scriptsA, key, 'tok-a', 'store', 202, 'late')).toBe(0);
      expect(await settle(scriptsB, key, 'tok-b', 'store', 202, 'b')).toBe(1);
      expect(await claim(scriptsA, key, 'h1', 'tok-c')).toEqual(['done', '202', 'b']);
    });

    it('keeps a stored answer only for its time', async () => {
      const key = keys.idempotency('acme', uniq('k'));
      await claim(scriptsA, key, 'h1', 'tok-a', 30_000);
      await settle(scriptsA, key, 'tok-a', 'store', 202, 'x', 150);
      expect(await claim(scriptsB, key, 'h1', 'tok-b')).toEqual(['done', '202', 'x']);
      await eventually(async () => ((await a.exists(key)) === 0 ? true : undefined), 2_000, 'the stored answer to expire', 20);
      expect(await claim(scriptsB, key, 'h1', 'tok-b')).toEqual(['claimed']);
    });

    it('lets exactly one of many concurrent claimants win', async () => {
      const key = keys.idempotency('acme', uniq('k'));
      const res = (await Promise.all(Array.from({ length: 50 }, (_, i) => claim(i % 2 ? scriptsA : scriptsB, key, 'h1', `tok-${i}`)))) as string[][];
      expect(res.filter((r) => r[0] === 'claimed')).toHaveLength(1);
      expect(res.filter((r) => r[0] === 'pending')).toHaveLength(49);
    });
  });

  describe('IdempotencyStore', () => {
    const storeA = () => new IdempotencyStore(scriptsA, keys, opts);
    const storeB = () => new IdempotencyStore(scriptsB, keys, opts);

    it('claims under the SHA-256 of the key, per tenant', async () => {
      const k = uniq('key');
      const c = await storeA().claim('acme', k, 'fp');
      expect(c.kind).toBe('claimed');
      expect(await a.hget(keys.idempotency('acme', digest(k)), 'token')).toBe(c.kind === 'claimed' ? c.token : 'none');
      // the same key of another tenant is another record
      expect((await storeB().claim('globex', k, 'fp')).kind).toBe('claimed');
    });

    it('replays the stored answer (status, headers, body) to the same request', async () => {
      const k = uniq('key');
      const fp = requestFingerprint('triage', {}, canonicalJson({ a: 1, b: 2 }));
      const c = await storeA().claim('acme', k, fp);
      if (c.kind !== 'claimed') throw new Error(`expected a claim, got ${c.kind}`);
      await storeA().store('acme', k, c.token, answer('r1'));
      // key order in the body does not change the fingerprint
      const again = await storeB().claim('acme', k, requestFingerprint('triage', {}, canonicalJson({ b: 2, a: 1 })));
      expect(again).toEqual({ kind: 'replay', answer: answer('r1') });
      const pttl = await a.pttl(keys.idempotency('acme', digest(k)));
      expect(pttl).toBeGreaterThan(86_400_000 - 10_000);
      expect(pttl).toBeLessThanOrEqual(86_400_000);
    });

    it('answers conflict to a different request with the same key, pending or done', async () => {
      const k = uniq('key');
      const c = await storeA().claim('acme', k, 'fp-1');
      expect(await storeB().claim('acme', k, 'fp-2')).toEqual({ kind: 'conflict' });
      if (c.kind !== 'claimed') throw new Error('expected a claim');
      await storeA().store('acme', k, c.token, answer('r1'));
      expect(await storeB().claim('acme', k, 'fp-2')).toEqual({ kind: 'conflict' });
    });

    it('makes a concurrent duplicate wait for the first answer and replay it', async () => {
      const k = uniq('key');
      const started = Date.now();
      const claimant = async (store: IdempotencyStore) => {
        const c = await store.claim('acme', k, 'fp');
        if (c.kind === 'claimed') {
          await sleep(100);
          await store.store('acme', k, c.token, answer('first'));
          return { c, at: Date.now() - started };
        }
        return { c, at: Date.now() - started };
      };
      const [x, y] = await Promise.all([claimant(storeA()), claimant(storeB())]);
      const kinds = [x.c.kind, y.c.kind].sort();
      expect(kinds).toEqual(['claimed', 'replay']);
      const replay = x.c.kind === 'replay' ? x : y;
      expect(replay.c).toEqual({ kind: 'replay', answer: answer('first') });
      // it waited for the answer: not before the first stored it (~100 ms), well within waitMs
      expect(replay.at).toBeGreaterThanOrEqual(95);
      expect(replay.at).toBeLessThan(opts.waitMs);
    });

    it('gives up with in_progress after waitMs when the first request does not answer', async () => {
      const k = uniq('key');
      expect((await storeA().claim('acme', k, 'fp')).kind).toBe('claimed');
      const impatient = new IdempotencyStore(scriptsB, keys, { ...opts, waitMs: 150, pollMs: 20 });
      const t0 = Date.now();
      expect(await impatient.claim('acme', k, 'fp')).toEqual({ kind: 'in_progress' });
      const waited = Date.now() - t0;
      expect(waited).toBeGreaterThanOrEqual(150);
      expect(waited).toBeLessThan(1_000);
      // waitMs 0: a single look
      const t1 = Date.now();
      expect(await new IdempotencyStore(scriptsB, keys, { ...opts, waitMs: 0 }).claim('acme', k, 'fp')).toEqual({ kind: 'in_progress' });
      expect(Date.now() - t1).toBeLessThan(200);
    });

    it('takes the key over when the first claimant’s lease runs out while a duplicate waits', async () => {
      const k = uniq('key');
      const short = { ...opts, pendingMs: 100 };
      const first = await new IdempotencyStore(scriptsA, keys, short).claim('acme', k, 'fp');
      if (first.kind !== 'claimed') throw new Error('expected a claim');
      const second = await new IdempotencyStore(scriptsB, keys, { ...short, waitMs: 2_000 }).claim('acme', k, 'fp');
      expect(second.kind).toBe('claimed');
      if (second.kind !== 'claimed') return;
      expect(second.token).not.toBe(first.token);
      // the crashed-and-back first claimant cannot overwrite the new holder's answer
      await storeA().store('acme', k, first.token, answer('stale'));
      await storeB().store('acme', k, second.token, answer('fresh'));
      expect(await storeA().claim('acme', k, 'fp')).toEqual({ kind: 'replay', answer: answer('fresh') });
    });

    it('reads a stored answer without claiming the key; nothing while the key is free or only claimed', async () => {
      const k = uniq('key');
      expect(await storeA().answer('acme', k)).toBeUndefined();
      const c = await storeA().claim('acme', k, 'fp');
      if (c.kind !== 'claimed') throw new Error('expected a claim');
      expect(await storeB().answer('acme', k)).toBeUndefined();
      expect(await a.hget(keys.idempotency('acme', digest(k)), 'state')).toBe('pending');
      await storeA().store('acme', k, c.token, answer('r1'));
      expect(await storeB().answer('acme', k)).toEqual(answer('r1'));
      // Per tenant, like every key.
      expect(await storeB().answer('other', k)).toBeUndefined();
    });

    it('forget frees the key so a refused request may be retried', async () => {
      const k = uniq('key');
      const c = await storeA().claim('acme', k, 'fp');
      if (c.kind !== 'claimed') throw new Error('expected a claim');
      await storeA().forget('acme', k, c.token);
      expect(await a.exists(keys.idempotency('acme', digest(k)))).toBe(0);
      expect((await storeB().claim('acme', k, 'fp')).kind).toBe('claimed');
    });

    it('a stored answer lives ttlSec, then the key is free again', async () => {
      const k = uniq('key');
      const store = new IdempotencyStore(scriptsA, keys, { ...opts, ttlSec: 1 });
      const c = await store.claim('acme', k, 'fp');
      if (c.kind !== 'claimed') throw new Error('expected a claim');
      await store.store('acme', k, c.token, answer('r1'));
      const pttl = await a.pttl(keys.idempotency('acme', digest(k)));
      expect(pttl).toBeGreaterThan(800);
      expect(pttl).toBeLessThanOrEqual(1_000);
      expect((await store.claim('acme', k, 'fp')).kind).toBe('replay');
      await eventually(async () => ((await store.claim('acme', k, 'fp')).kind === 'claimed' ? true : undefined), 3_000, 'the stored answer to expire', 50);
    });
  });
});
