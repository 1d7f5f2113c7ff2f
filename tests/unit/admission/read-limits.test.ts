import { describe, expect, it } from 'vitest';
import type { BucketTake } from '../../../src/admission/local-token-bucket.js';
import { ReadLimits, STREAM_RETRY_AFTER_SEC, StreamSlots } from '../../../src/admission/read-limits.js';
import { loadConfig } from '../../../src/config/load.js';
import type { Logger } from '../../../src/obs/logger.js';
import { createMetrics, type Metrics } from '../../../src/obs/metrics.js';
import { metricValue } from '../../support/metric-value.js';

describe('StreamSlots', () => {
  it('gives a tenant up to `max` slots and refuses the next', () => {
    const slots = new StreamSlots();
    const taken = [slots.tryTake('a', 3), slots.tryTake('a', 3), slots.tryTake('a', 3)];
    expect(taken.every((r) => typeof r === 'function')).toBe(true);
    expect(slots.tryTake('a', 3)).toBeUndefined();
    expect(slots.count('a')).toBe(3);
  });

  it('counts each tenant on its own', () => {
    const slots = new StreamSlots();
    expect(slots.tryTake('a', 1)).toBeDefined();
    expect(slots.tryTake('a', 1)).toBeUndefined();
    expect(slots.tryTake('b', 1)).toBeDefined();
    expect(slots.count('b')).toBe(1);
  });

  it('frees a slot on release, once however often the release is called', () => {
    const slots = new StreamSlots();
    const first = slots.tryTake('a', 2)!;
    slots.tryTake('a', 2);
    first();
    first();
    first();
    expect(slots.count('a')).toBe(1);
    expect(slots.tryTake('a', 2)).toBeDefined();
    expect(slots.tryTake('a', 2)).toBeUndefined();
  });

  it('forgets a tenant that holds nothing', () => {
    const slots = new StreamSlots();
    const release = slots.tryTake('a', 1)!;
    release();
    expect(slots.count('a')).toBe(0);
    expect((slots as unknown as { held: Map<string, number> }).held.size).toBe(0);
  });

  it('applies the bound given at each take (a config change holds for the next stream)', () => {
    const slots = new StreamSlots();
    slots.tryTake('a', 2);
    slots.tryTake('a', 2);
    expect(slots.tryTake('a', 1)).toBeUndefined();
    expect(slots.tryTake('a', 3)).toBeDefined();
  });
});

/** ReadLimits over a scripted store; `answer` is what the next take gets (an Error: Redis failed; 'hang': never answers). */
function limits(opts: { capacity?: number; refillPerSec?: number; maxStreams?: number } = {}) {
  const config = loadConfig({ env: {} });
  const reads = config.tenants['tenant-a']!.reads;
  reads.bucket = { capacity: opts.capacity ?? 2, refillPerSec: opts.refillPerSec ?? 1 };
  reads.maxStreams = opts.maxStreams ?? 1;
  const metrics: Metrics = createMetrics();
  const logged: { level: string; msg: string }[] = [];
  const logger = {
    child: () => logger,
    warn: (_o: unknown, msg: string) => logged.push({ level: 'warn', msg }),
    info: (msg: string) => logged.push({ level: 'info', msg }),
  } as unknown as Logger;
  let now = 1_000_000;
  const state = { answer: { allowed: true, tokensLeft: 1, waitMs: 0 } as BucketTake | Error | 'hang', calls: [] as unknown[][] };
  const rl = new ReadLimits({
    config,
    metrics,
    logger,
    now: () => now,
    timeoutMs: 20,
    store: {
      takeReadToken: (...args) => {
        state.calls.push(args);
        const a = state.answer;
        if (a === 'hang') return new Promise<BucketTake>(() => undefined);
        return a instanceof Error ? Promise.reject(a) : Promise.resolve(a);
      },
    },
  });
  const count = (name: 'readRefusals' | 'readLimitFallbacks', labels: Record<string, string>) => metricValue(metrics[name], labels);
  return { rl, state, logged, count, advance: (ms: number) => (now += ms) };
}

describe('ReadLimits.take', () => {
  it("takes from the tenant's read bucket with its configured size and refill", async () => {
    const { rl, state } = limits({ capacity: 7, refillPerSec: 3 });
    expect(await rl.take('tenant-a')).toBeUndefined();
    expect(state.calls).toEqual([['tenant-a', 7, 3]]);
  });

  it('refuses with the real wait in whole seconds, rounded up, and counts it', async () => {
    const { rl, state, count } = limits();
    for (const [waitMs, sec] of [
      [1, 1],
      [1_000, 1],
      [1_001, 2],
      [59_999, 60],
      [-1, 3600],
    ] as const) {
      state.answer = { allowed: false, tokensLeft: 0, waitMs };
      expect((await rl.take('tenant-a'))?.retryAfterSec, String(waitMs)).toBe(sec);
    }
    expect(await count('readRefusals', { tenant: 'tenant-a', reason: 'rate_limited' })).toBe(5);
  });

  it('fails open to a bucket of its own, of the same size, while Redis fails, counting each such read', async () => {
    const { rl, state, count } = limits({ capacity: 2, refillPerSec: 1 });
    state.answer = new Error('Connection is closed.');
    expect(await rl.take('tenant-a')).toBeUndefined();
    expect(await rl.take('tenant-a')).toBeUndefined();
    expect(await rl.take('tenant-a')).toEqual({ detail: expect.stringContaining('read rate'), retryAfterSec: 1 });
    expect(await count('readLimitFallbacks', { tenant: 'tenant-a' })).toBe(3);
    expect(await count('readRefusals', { tenant: 'tenant-a', reason: 'rate_limited' })).toBe(1);
  });

  it('refills the local bucket with the injected clock', async () => {
    const { rl, state, advance } = limits({ capacity: 1, refillPerSec: 1 });
    state.answer = new Error('down');
    expect(await rl.take('tenant-a')).toBeUndefined();
    expect(await rl.take('tenant-a')).toBeDefined();
    advance(1_000);
    expect(await rl.take('tenant-a')).toBeUndefined();
  });

  it('falls back when Redis does not answer in time, instead of holding the read', async () => {
    const { rl, state, count } = limits();
    state.answer = 'hang';
    const started = Date.now();
    expect(await rl.take('tenant-a')).toBeUndefined();
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(await count('readLimitFallbacks', { tenant: 'tenant-a' })).toBe(1);
  });

  it('logs when it starts deciding alone and when Redis answers again, not on every read', async () => {
    const { rl, state, logged } = limits({ capacity: 100 });
    state.answer = new Error('down');
    for (let i = 0; i < 5; i++) await rl.take('tenant-a');
    state.answer = { allowed: true, tokensLeft: 1, waitMs: 0 };
    for (let i = 0; i < 5; i++) await rl.take('tenant-a');
    expect(logged.map((l) => l.level)).toEqual(['warn', 'info']);
  });

  it('refuses to guess for a tenant that is not configured', async () => {
    const { rl } = limits();
    await expect(rl.take('nobody')).rejects.toThrow('no tenant "nobody"');
    await expect(rl.take('constructor')).rejects.toThrow('no tenant');
  });
});

describe('ReadLimits.openStream', () => {
  it("grants up to the tenant's maxStreams, then refuses with the stream hint and counts it", async () => {
    const { rl, count } = limits({ maxStreams: 2 });
    const a = rl.openStream('tenant-a');
    const b = rl.openStream('tenant-a');
    expect([a.granted, b.granted]).toEqual([true, true]);
    const refused = rl.openStream('tenant-a');
    expect(refused).toEqual({ granted: false, refusal: { detail: expect.stringContaining('2 event streams'), retryAfterSec: STREAM_RETRY_AFTER_SEC } });
    expect(await count('readRefusals', { tenant: 'tenant-a', reason: 'streams_full' })).toBe(1);
    if (a.granted) a.release();
    expect(rl.openStream('tenant-a').granted).toBe(true);
  });

  it("uses each tenant's own bound", () => {
    const { rl } = limits({ maxStreams: 1 });
    expect(rl.openStream('tenant-a').granted).toBe(true);
    expect(rl.openStream('tenant-a').granted).toBe(false);
    expect(rl.openStream('tenant-b').granted).toBe(true);
  });
});

