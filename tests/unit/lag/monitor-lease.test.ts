import { describe, expect, it } from 'vitest';
import { MonitorLease, monitorScope } from '../../../src/lag/monitor-lease.js';
import type { AcquireResult, PermitLease, PermitStore } from '../../../src/permits/permit-store.js';
import type { PermitScope } from '../../../src/permits/permit-scopes.js';
import { redisKeys } from '../../../src/redis/keys.js';

const TTL = 9_000;

/** A permit store with one scope of limit 1, leases expiring on the same clock; `down` makes every call throw. */
function fakeStore(clock: { now: number }) {
  const state = { holder: undefined as string | undefined, expiresAt: 0, down: false, calls: [] as string[] };
  let n = 0;
  const free = () => state.holder === undefined || state.expiresAt <= clock.now;
  const store: Pick<PermitStore, 'tryAcquire' | 'renew' | 'release'> = {
    tryAcquire: async (scopes: readonly PermitScope[], ttlMs: number, owner: string): Promise<AcquireResult> => {
      state.calls.push('acquire');
      if (state.down) throw new Error('Connection is closed.');
      if (!free()) return { granted: false, blockedBy: scopes[0]!.name, count: 1, limit: 1 };
      const token = `${owner}:${++n}`;
      state.holder = token;
      state.expiresAt = clock.now + ttlMs;
      return { granted: true, lease: { token, scopes: scopes.map((s) => s.name), keys: scopes.map((s) => s.key), expiresAt: state.expiresAt } };
    },
    renew: async (lease: PermitLease, ttlMs: number) => {
      state.calls.push('renew');
      if (state.down) throw new Error('Connection is closed.');
      if (state.holder !== lease.token || state.expiresAt <= clock.now) return false;
      state.expiresAt = clock.now + ttlMs;
      return true;
    },
    release: async (lease: PermitLease) => {
      state.calls.push('release');
      if (state.holder !== lease.token) return 0;
      state.holder = undefined;
      return 1;
    },
  };
  return { store, state };
}

function setup() {
  const clock = { now: 1_000_000 };
  const { store, state } = fakeStore(clock);
  const scope = monitorScope(redisKeys('ns.'));
  const lease = (owner: string) => new MonitorLease(store, scope, { ttlMs: TTL, owner, now: () => clock.now });
  return { clock, state, lease };
}

describe('monitorScope', () => {
  it('is one permit under the permits hash tag, in a field no admin call can set', () => {
    expect(monitorScope(redisKeys('ns.'))).toEqual({ name: 'lag-monitor', key: '{ns.sluice:permits}:scope:lag-monitor', limitField: 'lag-monitor', defaultLimit: 1, share: 1 });
  });
});

describe('MonitorLease', () => {
  it('one of two instances takes the lease; the other does not', async () => {
    const { lease } = setup();
    const a = lease('a');
    const b = lease('b');
    expect(await a.refresh()).toBe(true);
    expect(await b.refresh()).toBe(false);
    expect([a.held, b.held]).toEqual([true, false]);
  });

  it('the holder keeps it by renewing', async () => {
    const { clock, state, lease } = setup();
    const a = lease('a');
    const b = lease('b');
    await a.refresh();
    for (let i = 0; i < 5; i++) {
      clock.now += TTL / 3;
      expect(await a.refresh()).toBe(true);
      expect(await b.refresh()).toBe(false);
    }
    expect(state.calls.filter((c) => c === 'renew')).toHaveLength(5);
  });

  it('hands over when released: the other takes it at its next refresh', async () => {
    const { lease } = setup();
    const a = lease('a');
    const b = lease('b');
    await a.refresh();
    await a.release();
    expect(a.held).toBe(false);
    expect(await b.refresh()).toBe(true);
  });

  it('hands over when the holder stops renewing (it died): once the lease lapsed', async () => {
    const { clock, lease } = setup();
    const a = lease('a');
    const b = lease('b');
    await a.refresh();
    clock.now += TTL - 1;
    expect(await b.refresh()).toBe(false);
    clock.now += 1;
    expect(await b.refresh()).toBe(true);
  });

  it('a holder that finds its lease taken over steps down', async () => {
    const { clock, lease } = setup();
    const a = lease('a');
    const b = lease('b');
    await a.refresh();
    clock.now += TTL;
    await b.refresh();
    expect(await a.refresh()).toBe(false);
    expect(a.held).toBe(false);
  });

  it('while Redis does not answer, the holder counts itself active only until its last confirmed lease would have lapsed', async () => {
    const { clock, state, lease } = setup();
    const a = lease('a');
    await a.refresh();
    state.down = true;
    clock.now += TTL / 3;
    await expect(a.refresh()).rejects.toThrow('Connection is closed.');
    expect(a.held).toBe(true);
    clock.now += TTL - TTL / 3 - 1;
    expect(a.held).toBe(true);
    clock.now += 1;
    expect(a.held).toBe(false);
  });

  it('measures a lease from the start of the call that confirmed it, so a slow answer never stretches it', async () => {
    const clock = { now: 0 };
    const { store } = fakeStore(clock);
    const slow: typeof store = { ...store, tryAcquire: async (...args) => ((clock.now += 2_000), store.tryAcquire(...args)) };
    const a = new MonitorLease(slow, monitorScope(redisKeys('')), { ttlMs: TTL, owner: 'a', now: () => clock.now });
    await a.refresh();
    clock.now = TTL - 1;
    expect(a.held).toBe(true);
    clock.now = TTL;
    expect(a.held).toBe(false);
  });

  it('after Redis comes back, a holder whose lease lapsed meanwhile takes a new one if it is free', async () => {
    const { clock, state, lease } = setup();
    const a = lease('a');
    await a.refresh();
    state.down = true;
    clock.now += 2 * TTL;
    await expect(a.refresh()).rejects.toThrow();
    state.down = false;
    expect(await a.refresh()).toBe(true);
    expect(state.calls.at(-1)).toBe('acquire');
  });

  it('release without a lease does nothing', async () => {
    const { state, lease } = setup();
    await lease('a').release();
    expect(state.calls).toEqual([]);
  });
});
