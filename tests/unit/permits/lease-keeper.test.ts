import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createLogger } from '../../../src/obs/logger.js';
import { LeaseKeeper } from '../../../src/permits/lease-keeper.js';
import type { PermitLease } from '../../../src/permits/permit-store.js';

const logger = createLogger('silent');
const lease = (token: string): PermitLease => ({ token, scopes: ['global'], keys: ['k'], expiresAt: 0 });

/** A store whose renewals answer what the test says (true by default), recording every call. */
function fakeStore() {
  const renewals: string[] = [];
  const releases: string[] = [];
  let answer: () => Promise<boolean> = async () => true;
  return {
    renewals,
    releases,
    answer: (fn: () => Promise<boolean>) => void (answer = fn),
    renew: async (l: PermitLease, ttlMs: number) => {
      renewals.push(`${l.token}@${ttlMs}`);
      return answer();
    },
    release: async (l: PermitLease) => {
      releases.push(l.token);
      return 1;
    },
  };
}

let store: ReturnType<typeof fakeStore>;
let keeper: LeaseKeeper;

beforeEach(() => {
  vi.useFakeTimers();
  store = fakeStore();
  keeper = new LeaseKeeper(store, { ttlMs: 3_000, maxLeases: 2, logger });
});

afterEach(() => {
  keeper.stop();
  vi.useRealTimers();
});

describe('LeaseKeeper', () => {
  it('renews every TTL/3 with the TTL, for as long as the lease is held', async () => {
    keeper.keep(lease('a'), () => {});
    await vi.advanceTimersByTimeAsync(999);
    expect(store.renewals).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(store.renewals).toEqual(['a@3000']);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(store.renewals).toHaveLength(11);
  });

  it('stops renewing on release and gives the permits back', async () => {
    const l = lease('a');
    keeper.keep(l, () => {});
    await vi.advanceTimersByTimeAsync(1_000);
    expect(await keeper.release(l)).toBe(1);
    expect(store.releases).toEqual(['a']);
    expect(keeper.size).toBe(0);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(store.renewals).toEqual(['a@3000']);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('reports a lost lease to its holder once and stops renewing it', async () => {
    const lost: PermitLease[] = [];
    const l = lease('a');
    keeper.keep(l, (x) => lost.push(x));
    keeper.keep(lease('b'), () => {});
    store.answer(async () => false);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(lost).toEqual([l]);
    expect(keeper.size).toBe(0);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(lost).toHaveLength(1);
    expect(store.renewals).toEqual(['a@3000', 'b@3000']);
  });

  it('keeps trying after a failed renewal: the lease may still be alive', async () => {
    const lost: PermitLease[] = [];
    keeper.keep(lease('a'), (x) => lost.push(x));
    store.answer(async () => {
      throw new Error('connection lost');
    });
    await vi.advanceTimersByTimeAsync(2_000);
    expect(store.renewals).toHaveLength(2);
    store.answer(async () => true);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(store.renewals).toHaveLength(3);
    expect(lost).toEqual([]);
    expect(keeper.size).toBe(1);
  });

  it('ignores the answer of a renewal that was in flight when the lease was released', async () => {
    const lost: PermitLease[] = [];
    let answerRenewal!: (held: boolean) => void;
    store.answer(() => new Promise<boolean>((resolve) => (answerRenewal = resolve)));
    const l = lease('a');
    keeper.keep(l, (x) => lost.push(x));
    await vi.advanceTimersByTimeAsync(1_000);
    await keeper.release(l);
    answerRenewal(false);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(lost).toEqual([]);
    expect(store.renewals).toHaveLength(1);
  });

  it('survives a lost-lease callback that throws', async () => {
    keeper.keep(lease('a'), () => {
      throw new Error('holder broke');
    });
    store.answer(async () => false);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(keeper.size).toBe(0);
  });

  it('keeps a bounded number of leases, and a lease only once', () => {
    keeper.keep(lease('a'), () => {});
    expect(() => keeper.keep(lease('a'), () => {})).toThrow('already kept');
    keeper.keep(lease('b'), () => {});
    expect(() => keeper.keep(lease('c'), () => {})).toThrow(RangeError);
    expect(keeper.size).toBe(2);
  });

  it('clears every timer on stop, without releasing', async () => {
    keeper.keep(lease('a'), () => {});
    keeper.keep(lease('b'), () => {});
    expect(vi.getTimerCount()).toBe(2);
    keeper.stop();
    expect(vi.getTimerCount()).toBe(0);
    expect(keeper.size).toBe(0);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(store.renewals).toEqual([]);
    expect(store.releases).toEqual([]);
  });
});
