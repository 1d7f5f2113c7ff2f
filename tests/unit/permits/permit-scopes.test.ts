import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import { configuredLimit, dependencyCallScopes, dependencyScope, limitField, runScopeNames, runScopes, slotsFor } from '../../../src/permits/permit-scopes.js';
import { fairShareLimit, limitAtShare } from '../../../src/util/limit-share.js';
import { redisKeys } from '../../../src/redis/keys.js';

const config = loadConfig({ env: {} });
const keys = redisKeys('ns.');

describe('runScopes', () => {
  it('holds global, tenant and workflow for an interactive run, with their configured limits', () => {
    expect(runScopes(config, keys, { tenantId: 'tenant-a', workflow: 'support-reply', runClass: 'interactive' })).toEqual([
      { name: 'global', key: '{ns.sluice:permits}:scope:global', limitField: 'global', defaultLimit: 64, share: 1 },
      { name: 'tenant:tenant-a', key: '{ns.sluice:permits}:scope:tenant:tenant-a', limitField: 'tenant:tenant-a', defaultLimit: 16, share: 1 },
      { name: 'workflow:support-reply', key: '{ns.sluice:permits}:scope:workflow:support-reply', limitField: 'workflow:support-reply', defaultLimit: 32, share: 1 },
    ]);
  });

  it('adds the batch class after global for a batch run: the global limit (as set at run time) times the batch share', () => {
    const scopes = runScopes(config, keys, { tenantId: 'tenant-b', workflow: 'report-digest', runClass: 'batch' });
    expect(scopes.map((s) => s.name)).toEqual(['global', 'class:batch', 'tenant:tenant-b', 'workflow:report-digest']);
    expect(scopes[1]).toEqual({ name: 'class:batch', key: '{ns.sluice:permits}:scope:class:batch', limitField: 'global', defaultLimit: 64, share: 0.8 });
  });

  it('names the same scopes as runScopeNames, for either class', () => {
    for (const runClass of ['interactive', 'batch'] as const) {
      const run = { tenantId: 'tenant-b', workflow: 'report-digest', runClass };
      expect(runScopeNames(run)).toEqual(runScopes(config, keys, run).map((s) => s.name));
    }
  });

  it('follows per-tenant and per-workflow maxConcurrency from config', () => {
    const custom = structuredClone(config);
    custom.tenants['tenant-c']!.maxConcurrency = 3;
    custom.workflows['support-reply']!.maxConcurrency = 7;
    const scopes = runScopes(custom, keys, { tenantId: 'tenant-c', workflow: 'support-reply', runClass: 'interactive' });
    expect(scopes.map((s) => s.defaultLimit)).toEqual([64, 3, 7]);
  });

  it('refuses a tenant or workflow that is not configured, including inherited object members', () => {
    expect(() => runScopes(config, keys, { tenantId: 'nobody', workflow: 'support-reply', runClass: 'interactive' })).toThrow('no tenant "nobody" in the configuration');
    expect(() => runScopes(config, keys, { tenantId: 'tenant-a', workflow: 'constructor', runClass: 'batch' })).toThrow('no workflow "constructor" in the configuration');
  });

  it('keeps every key under one hash tag per namespace', () => {
    for (const ns of ['', 'prod.']) {
      const k = redisKeys(ns);
      const all = [...runScopes(config, k, { tenantId: 'tenant-a', workflow: 'report-digest', runClass: 'batch' }), dependencyScope(config, k, 'anthropic')].map((s) => s.key);
      for (const key of [...all, k.permitLimits(), k.permitReleased()]) expect(key.startsWith(`{${ns}sluice:permits}:`), key).toBe(true);
    }
  });
});

describe('dependencyScope', () => {
  it('is one scope named after the dependency, limited by its maxConcurrency', () => {
    expect(dependencyScope(config, keys, 'order-lookup')).toEqual({
      name: 'dependency:order-lookup',
      key: '{ns.sluice:permits}:scope:dependency:order-lookup',
      limitField: 'dependency:order-lookup',
      defaultLimit: 8,
      share: 1,
    });
    expect(() => dependencyScope(config, keys, 'toString')).toThrow('no dependency "toString" in the configuration');
  });

  it('names the adaptive concurrency figure of a dependency that has one, in the permit slot, with its max', () => {
    const adaptive = structuredClone(config);
    adaptive.dependencies['order-lookup']!.adaptiveConcurrency = { min: 1, decreaseFactor: 0.7, cooldownMs: 1_000, idleResetMs: 60_000 };
    expect(dependencyScope(adaptive, keys, 'order-lookup', 0.5)).toMatchObject({ share: 0.5, adaptive: { key: '{ns.sluice:permits}:adaptive:order-lookup', max: 8 } });
    adaptive.dependencies['order-lookup']!.adaptiveConcurrency!.max = 20;
    expect(dependencyScope(adaptive, keys, 'order-lookup').adaptive).toEqual({ key: keys.adaptiveLimit('order-lookup'), max: 20 });
  });
});

describe('dependencyCallScopes', () => {
  it("holds the dependency's scope and then the tenant's fair part of it, by default", () => {
    const [shared, part] = dependencyCallScopes(config, keys, 'anthropic', 'tenant-a', { share: 0.5, claimMs: 3_000 });
    expect(shared).toEqual(dependencyScope(config, keys, 'anthropic', 0.5));
    expect(part).toEqual({
      name: 'dependency:anthropic:tenant:tenant-a',
      key: '{ns.sluice:permits}:scope:dependency:anthropic:tenant:tenant-a',
      limitField: 'dependency:anthropic:tenant:tenant-a',
      defaultLimit: 16,
      share: 1,
      fairShare: {
        of: 'dependency:anthropic',
        waitingKey: '{ns.sluice:permits}:waiting:anthropic',
        waitingCallsKey: '{ns.sluice:permits}:waiting:anthropic:tenant:tenant-a',
        tenant: 'tenant-a',
        claimMs: 3_000,
      },
    });
  });

  it('holds the dependency alone when it opts out with tenantFairShare: false', () => {
    const custom = structuredClone(config);
    custom.dependencies['order-lookup']!.tenantFairShare = false;
    expect(dependencyCallScopes(custom, keys, 'order-lookup', 'tenant-a', { claimMs: 3_000 })).toEqual([dependencyScope(custom, keys, 'order-lookup')]);
  });
});

describe('fairShareLimit', () => {
  it('leaves the whole limit to a tenant nobody else waits behind', () => {
    expect([16, 1, 0].map((l) => fairShareLimit(l, 0))).toEqual([16, 1, 0]);
  });

  it('splits an open limit evenly among the waiting tenants and this one, at least one each, rounding down', () => {
    expect([1, 2, 3, 15, 16].map((others) => fairShareLimit(16, others))).toEqual([8, 5, 4, 1, 1]);
    expect(fairShareLimit(9, 2)).toBe(3);
    expect(fairShareLimit(1, 1)).toBe(1);
  });

  it('keeps a closed limit closed', () => {
    expect(fairShareLimit(0, 3)).toBe(0);
  });
});

describe('limitField and configuredLimit', () => {
  it('names the fields of the limits hash after the scopes', () => {
    expect(limitField('global')).toBe('global');
    expect(limitField('tenant', 'acme')).toBe('tenant:acme');
    expect(limitField('workflow', 'wf')).toBe('workflow:wf');
    expect(limitField('dependency', 'anthropic')).toBe('dependency:anthropic');
  });

  it('answers the configured limit, or undefined for a name config does not have', () => {
    expect(configuredLimit(config, 'global')).toBe(64);
    expect(configuredLimit(config, 'tenant', 'tenant-a')).toBe(16);
    expect(configuredLimit(config, 'workflow', 'report-digest')).toBe(32);
    expect(configuredLimit(config, 'dependency', 'anthropic')).toBe(16);
    expect(configuredLimit(config, 'tenant', 'nobody')).toBeUndefined();
    expect(configuredLimit(config, 'tenant')).toBeUndefined();
    expect(configuredLimit(config, 'dependency', '__proto__')).toBeUndefined();
  });
});

describe('limitAtShare', () => {
  it('is floor(global × share), never losing a permit to binary rounding', () => {
    expect(limitAtShare(64, 0.8)).toBe(51);
    expect(limitAtShare(100, 0.57)).toBe(57);
    expect(limitAtShare(10, 0.5)).toBe(5);
    expect(limitAtShare(10, 1)).toBe(10);
  });

  it('leaves batch at least one permit while global is open, and none while it is closed', () => {
    expect(limitAtShare(10, 0)).toBe(1);
    expect(limitAtShare(1, 0.5)).toBe(1);
    expect(limitAtShare(0, 0.8)).toBe(0);
  });

  it('counts as admission counts batch slots, so wait estimates match the caps', () => {
    for (const global of [1, 2, 7, 64, 100, 999]) for (const share of [0, 0.1, 0.33, 0.57, 0.8, 1]) expect(limitAtShare(global, share)).toBe(slotsFor('batch', global, share));
  });
});

describe('slotsFor', () => {
  it('gives interactive work the whole global cap, whatever the batch share', () => {
    expect(slotsFor('interactive', 64, 0.8)).toBe(64);
    expect(slotsFor('interactive', 64, 0)).toBe(64);
    expect(slotsFor('interactive', 64, 1)).toBe(64);
    expect(slotsFor('interactive', 1, 0.5)).toBe(1);
  });

  it('never gives interactive work fewer than one slot', () => {
    expect(slotsFor('interactive', 0, 0.8)).toBe(1);
    expect(slotsFor('interactive', -5, 0.8)).toBe(1);
  });

  it('gives batch work its share of the global cap, rounded down', () => {
    expect(slotsFor('batch', 64, 0.8)).toBe(51); // 51.2
    expect(slotsFor('batch', 10, 0.25)).toBe(2); // 2.5
    expect(slotsFor('batch', 10, 0.3)).toBe(3); // 3.0000000000000004
    expect(slotsFor('batch', 3, 0.5)).toBe(1); // 1.5
    expect(slotsFor('batch', 100, 0.5)).toBe(50);
    expect(slotsFor('batch', 64, 1)).toBe(64);
    expect(slotsFor('batch', 1_000_000, 0.999999)).toBe(999_999);
  });

  it('never gives batch work fewer than one slot, even with share 0 or a tiny cap', () => {
    expect(slotsFor('batch', 64, 0)).toBe(1);
    expect(slotsFor('batch', 1, 0.8)).toBe(1); // 0.8 → 0 → 1
    expect(slotsFor('batch', 1, 0)).toBe(1);
    expect(slotsFor('batch', 0, 0.8)).toBe(1);
  });

  // Regression guard (this was a bug): `Math.floor(globalLimit * batchShare)` floors a binary floating-point product, so
  // shares that are not exact in binary lose a whole slot: 100 × 0.57 = 56.99999999999999 → 56.
  it('gives batch exactly share × cap slots when that is a whole number (no floating-point loss)', () => {
    expect(slotsFor('batch', 100, 0.57)).toBe(57);
    expect(slotsFor('batch', 100, 0.29)).toBe(29);
    expect(slotsFor('batch', 100, 0.58)).toBe(58);
  });
});
