import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import type { SluiceConfig } from '../../../src/config/schema.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { DependencyPacer } from '../../../src/pacing/dependency-pacer.js';
import type { BucketCharge, PaceReservation, PacingStore, ReserveOptions } from '../../../src/pacing/pacing-store.js';
import { MIN_USEFUL_CALL_MS } from '../../../src/runs/deadline.js';
import { headerReader } from '../../../src/steps/rate-limit-headers.js';
import { histogramValue, metricValue } from '../../support/metric-value.js';

const NOW = Date.parse('2026-12-01T03:00:00Z');
const base = loadConfig({ env: {} });
const config: SluiceConfig = {
  ...base,
  dependencies: { ...base.dependencies, anthropic: { ...base.dependencies.anthropic!, rateLimit: { requestsPerMinute: 50, burstSeconds: 2 } } },
};

const interactive = (deadline: number) => ({ class: 'interactive' as const, deadline, tenantId: 'tenant-a' });

function pacer(answers: PaceReservation[] = [], rampShare: (dependency: string) => number = () => 1) {
  const reserved: { dependency: string; charges: readonly BucketCharge[]; opts: ReserveOptions }[] = [];
  const settled: unknown[] = [];
  const observed: unknown[] = [];
  let now = NOW;
  const store: Pick<PacingStore, 'reserve' | 'settle' | 'observe'> = {
    reserve: async (dependency, charges, opts, _turn) => {
      reserved.push({ dependency, charges, opts });
      return answers.shift() ?? { reserved: true, waitMs: 0, heldByShare: false };
    },
    settle: async (...args) => void settled.push(args),
    observe: async (...args) => {
      observed.push(args);
      return 0;
    },
  };
  const metrics = createMetrics();
  const p = new DependencyPacer({ store, config, metrics, now: () => now, rampShare });
  return { p, reserved, settled, observed, metrics, setNow: (t: number) => (now = t) };
}

const gauge = async (metrics: ReturnType<typeof createMetrics>) => (await metrics.dependencyRateLimit.get()).values.map((v) => ({ ...v.labels, value: v.value }));

describe('DependencyPacer.book', () => {
  it('books within the inline wait the deadline leaves, with the burst and a keep time past the longest call', async () => {
    const { p, reserved, metrics } = pacer([{ reserved: true, waitMs: 250, heldByShare: false }]);
    expect(await p.book('anthropic', { inputTokens: 10, outputTokens: 512 }, interactive(NOW + 30_000))).toEqual({ kind: 'go', waitMs: 250 });
    const dep = config.dependencies.anthropic!;
    expect(reserved[0]).toEqual({
      dependency: 'anthropic',
      charges: [
        { bucket: 'requests', perMinute: 50, cost: 1 },
        { bucket: 'input_tokens', perMinute: 0, cost: 10 },
        { bucket: 'output_tokens', perMinute: 0, cost: 512 },
      ],
      opts: { maxWaitMs: 1_000, burstMs: 2_000, keepMs: dep.timeouts.totalMs + 1_000, share: 1, reserve: 0 },
    });
    expect(await histogramValue(metrics.pacingWait, { dependency: 'anthropic' })).toMatchObject({ count: 1, sum: 0.25 });
  });

  it('defers a call whose turn is too far, to when it would come, and counts it', async () => {
    const { p, reserved, metrics } = pacer([{ reserved: false, waitMs: 4_000, heldByShare: false }]);
    expect(await p.book('anthropic', { inputTokens: 10, outputTokens: 512 }, interactive(NOW + 1_050))).toEqual({ kind: 'defer', until: NOW + 4_000 });
    // the deadline leaves 1,050 ms, less a useful call's minimum: that is the wait allowed when below the configured 1 s
    expect(reserved[0]!.opts.maxWaitMs).toBe(1_050 - MIN_USEFUL_CALL_MS);
    expect(await metricValue(metrics.pacingDeferred, { dependency: 'anthropic', class: 'interactive' })).toBe(1);
  });

  it('has a batch call leave interactive calls the configured share of the burst, and scales limits by the ramp share', async () => {
    const { p, reserved, metrics } = pacer([{ reserved: false, waitMs: 700, heldByShare: false }], () => 0.25);
    expect(await p.book('anthropic', { inputTokens: 1, outputTokens: 1 }, { class: 'batch', deadline: NOW + 3_600_000, tenantId: 'tenant-a' })).toEqual({ kind: 'defer', until: NOW + 700 });
    expect(reserved[0]!.opts).toMatchObject({ share: 0.25, reserve: config.processor.pacing.interactiveReserve });
    expect(config.processor.pacing.interactiveReserve).toBe(1);
    expect(await metricValue(metrics.pacingDeferred, { dependency: 'anthropic', class: 'batch' })).toBe(1);
    expect(await gauge(metrics)).toContainEqual({ dependency: 'anthropic', bucket: 'requests', source: 'config', value: 12.5 });
  });

  it('asks nothing for a dependency with nothing to pace, or none configured', async () => {
    const { p, reserved } = pacer();
    const toolName = Object.entries(config.dependencies).find(([, d]) => d.kind === 'tool' && !d.rateLimit)![0];
    expect(await p.book(toolName, { inputTokens: 0, outputTokens: 0 }, interactive(NOW + 30_000))).toEqual({ kind: 'go', waitMs: 0 });
    expect(await p.book('gone', { inputTokens: 0, outputTokens: 0 }, interactive(NOW + 30_000))).toEqual({ kind: 'go', waitMs: 0 });
    expect(reserved).toEqual([]);
  });
});

describe('DependencyPacer.settle and learn', () => {
  it('settles an LLM call by its usage and nothing for a tool', async () => {
    const { p, settled } = pacer();
    await p.settle('anthropic', { inputTokens: 100, outputTokens: 512 }, { inputTokens: 80, outputTokens: 12 });
    const toolName = Object.entries(config.dependencies).find(([, d]) => d.kind === 'tool')![0];
    await p.settle(toolName, { inputTokens: 0, outputTokens: 0 }, { inputTokens: 0, outputTokens: 0 });
    expect(settled).toEqual([['anthropic', [{ bucket: 'input_tokens', delta: -20 }, { bucket: 'output_tokens', delta: -500 }], config.dependencies.anthropic!.timeouts.totalMs + 1_000]]);
  });

  it('shares reported limits and a not-before for the observed-limit time, and shows the lower limit as observed until then', async () => {
    const { p, observed, metrics, setNow } = pacer();
    expect(await gauge(metrics)).toContainEqual({ dependency: 'anthropic', bucket: 'requests', source: 'config', value: 50 });
    const headers = headerReader({ 'anthropic-ratelimit-requests-limit': '40', 'anthropic-ratelimit-requests-remaining': '0', 'anthropic-ratelimit-requests-reset': new Date(NOW + 3_000).toISOString() });
    await p.learn('anthropic', { headers, status: 200 });
    // one request of 40 is back after a 40th of the 3 s to the reset
    // it had none left after this call: it was seen to hold one
    expect(observed).toEqual([['anthropic', [{ bucket: 'requests', perMinute: 40, capacity: 1 }], NOW + 75, 600_000]]);
    const shown = (await gauge(metrics)).filter((g) => g.dependency === 'anthropic');
    expect(shown).toEqual([{ dependency: 'anthropic', bucket: 'requests', source: 'observed', value: 40 }]);
    // once the observed limit is no longer trusted, the configured one is shown again
    setNow(NOW + 600_001);
    await p.book('anthropic', { inputTokens: 1, outputTokens: 1 }, interactive(NOW + 700_000));
    expect((await gauge(metrics)).filter((g) => g.dependency === 'anthropic')).toEqual([{ dependency: 'anthropic', bucket: 'requests', source: 'config', value: 50 }]);
  });

  it('writes nothing when a response says nothing of the limits', async () => {
    const { p, observed } = pacer();
    await p.learn('anthropic', { headers: headerReader({}), status: 200 });
    await p.learn('anthropic', { status: 500 });
    expect(observed).toEqual([]);
  });
});

describe('DependencyPacer turns reserved at admission', () => {
  it('books a run’s request turns at once, its tenant’s share with them, and counts the turns per tenant', async () => {
    const { reserved, metrics } = pacer();
    const turns: unknown[] = [];
    const shared = new DependencyPacer({
      store: { reserve: async (d, c, o, turn) => (turns.push(turn), reserved.push({ dependency: d, charges: c, opts: o }), { reserved: true, waitMs: 120, heldByShare: false }), settle: async () => undefined, observe: async () => 0 },
      shares: { turn: (_dependency, tenant) => ({ tenant, share: 0.5, borrow: 1, borrowReserve: 0.2, demandWindowMs: 5_000 }), limitsRequests: (d) => d === 'anthropic', asksInteractive: () => false },
      config,
      metrics,
      now: () => NOW,
      rampShare: () => 1,
    });
    expect(await shared.bookTurns('anthropic', 2, { class: 'interactive', tenantId: 'tenant-c' }, 900)).toEqual({ reserved: true, waitMs: 120, heldByShare: false });
    expect(reserved.at(-1)).toMatchObject({ charges: [{ bucket: 'requests', perMinute: 50, cost: 2 }], opts: { maxWaitMs: 900 } });
    expect(turns).toEqual([{ tenant: 'tenant-c', share: 0.5, borrow: 1, borrowReserve: 0.2, demandWindowMs: 5_000 }]);
    expect(await metricValue(metrics.pacingTurns, { dependency: 'anthropic', tenant: 'tenant-c' })).toBe(2);
  });

  it('books only the tokens of a call whose request turn was reserved, and gives unused turns back to the tenant', async () => {
    const { p, reserved, settled } = pacer();
    await p.book('anthropic', { inputTokens: 10, outputTokens: 512 }, interactive(NOW + 30_000), true);
    expect(reserved[0]!.charges.map((c) => c.bucket)).toEqual(['input_tokens', 'output_tokens']);
    await p.giveBack('anthropic', 'tenant-c', 2);
    expect(settled).toEqual([['anthropic', [{ bucket: 'requests', delta: -2 }], config.dependencies.anthropic!.timeouts.totalMs + 1_000, 'tenant-c']]);
    await p.giveBack('anthropic', 'tenant-c', 0);
    expect(settled).toHaveLength(1);
  });

  it('reserves nothing for a dependency without request limits, configured or (as the shares last read) reported, and asks no Redis', async () => {
    const { p, reserved } = pacer();
    expect(await p.bookTurns('order-lookup', 1, { class: 'interactive', tenantId: 'tenant-a' }, 900)).toBeUndefined();
    expect(reserved).toEqual([]);
    const unlimited = { ...config, dependencies: { ...config.dependencies, anthropic: { ...config.dependencies.anthropic!, rateLimit: undefined } } };
    const asked: string[] = [];
    const q = new DependencyPacer({
      store: { reserve: async (d) => (asked.push(d), { reserved: true, waitMs: 0, heldByShare: false }), settle: async () => undefined, observe: async () => 0 },
      shares: { turn: (_d, tenant) => ({ tenant, share: 1, borrow: 1, borrowReserve: 0.2, demandWindowMs: 5_000 }), limitsRequests: () => false, asksInteractive: () => false },
      config: unlimited,
      metrics: createMetrics(),
      now: () => NOW,
      rampShare: () => 1,
    });
    expect(await q.bookTurns('anthropic', 2, { class: 'interactive', tenantId: 'tenant-a' }, 900)).toBeUndefined();
    expect(asked).toEqual([]);
  });
});
