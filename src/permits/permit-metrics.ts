import type { Redis } from 'ioredis';
import { Gauge, type Registry } from 'prom-client';
import type { SluiceConfig } from '../config/schema.js';
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
 * (one pipeline), so every instance reports the cluster-wide truth rather than its own share.
 */
export function registerPermitGauges(registry: Registry, redis: Redis, keys: RedisKeys, config: SluiceConfig): void {
  const scopes = configuredScopes(config);
  let snapshot: { inUse: number[]; limits: number[] } | undefined;
  // Both gauges read on their own scrape: one pipeline each, no ordering between them to rely on.
  const read = async () => {
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
    snapshot = {
      inUse: scopes.map((_, i) => Number(results[1 + i])),
      limits: scopes.map((s) => (s.name === 'class:batch' ? batchLimit(globalLimit, config.limits.batchShare) : (override(s.name) ?? s.defaultLimit))),
    };
  };
  const scopeGauge = (name: string, help: string, pick: (snap: NonNullable<typeof snapshot>) => number[]) =>
    new Gauge({
      name,
      help,
      labelNames: ['scope'],
      registers: [registry],
      async collect() {
        await read();
        const values = pick(snapshot!);
        scopes.forEach((s, i) => this.set({ scope: s.name }, values[i]!));
      },
    });
  scopeGauge('sluice_permits_in_use', 'Permits held now per scope, across all processors', (snap) => snap.inUse);
  scopeGauge('sluice_permit_limit', 'Effective concurrency limit per scope (config, or the run-time override)', (snap) => snap.limits);
}
