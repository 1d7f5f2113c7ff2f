import type { Redis } from 'ioredis';
import { Gauge } from 'prom-client';
import type { SluiceConfig } from '../config/schema.js';
import type { Metrics } from '../obs/metrics.js';
import type { RedisKeys } from '../redis/keys.js';
import { batchLimit, limitField, type LimitScope } from './permit-scopes.js';

/** Every configured scope with the field its run-time override lives in. */
export function configuredScopes(config: SluiceConfig): { name: string; defaultLimit: number }[] {
  const named = (scope: LimitScope, entries: Record<string, { maxConcurrency: number }>) => Object.entries(entries).map(([n, e]) => ({ name: limitField(scope, n), defaultLimit: e.maxConcurrency }));
  return [
    { name: 'global', defaultLimit: config.limits.global },
    { name: 'class:batch', defaultLimit: batchLimit(config.limits.global, config.limits.batchShare) },
    ...named('tenant', config.tenants),
    ...named('workflow', config.workflows),
    ...named('dependency', config.dependencies),
  ];
}

/**
 * `sluice_permits_in_use{scope}` and `sluice_permit_limit{scope}`, read from Redis at scrape time
 * (one pipeline per scrape), so every instance reports the cluster-wide truth rather than its own
 * share. While Redis cannot answer, both gauges are left out and the scrape still renders.
 */
export function registerPermitGauges(metrics: Pick<Metrics, 'registry' | 'scrapeCollectors'>, redis: Pick<Redis, 'pipeline'>, keys: RedisKeys, config: SluiceConfig): void {
  const scopes = configuredScopes(config);
  const scopeGauge = (name: string, help: string) => new Gauge({ name, help, labelNames: ['scope'], registers: [metrics.registry] });
  const inUse = scopeGauge('sluice_permits_in_use', 'Permits held now per scope, across all processors');
  const limit = scopeGauge('sluice_permit_limit', 'Effective concurrency limit per scope (config, or the run-time override)');
  metrics.scrapeCollectors.add({
    name: 'permits',
    read: async () => {
      const pipeline = redis.pipeline().hgetall(keys.permitLimits());
      const now = Date.now();
      for (const s of scopes) pipeline.zcount(keys.permitScope(s.name), now, '+inf');
      const results = ((await pipeline.exec()) ?? []).map(([err, v]) => {
        if (err) throw err;
        return v;
      });
      const overrides = results[0] as Record<string, string>;
      const override = (field: string) => (overrides[field] !== undefined ? Number(overrides[field]) : undefined);
      const globalLimit = override('global') ?? config.limits.global;
      return {
        inUse: scopes.map((_, i) => Number(results[1 + i])),
        limits: scopes.map((s) => (s.name === 'class:batch' ? batchLimit(globalLimit, config.limits.batchShare) : (override(s.name) ?? s.defaultLimit))),
      };
    },
    show: (snapshot) =>
      scopes.forEach((s, i) => {
        inUse.set({ scope: s.name }, snapshot.inUse[i]!);
        limit.set({ scope: s.name }, snapshot.limits[i]!);
      }),
    omit: () => {
      inUse.reset();
      limit.reset();
    },
  });
}
