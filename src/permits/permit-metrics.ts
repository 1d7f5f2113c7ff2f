import type { RedisClient } from '../redis/client.js';
import { Gauge } from 'prom-client';
import { rampUpShare } from '../config/ramp-up.js';
import type { SluiceConfig } from '../config/schema.js';
import type { Metrics } from '../obs/metrics.js';
import type { RedisKeys } from '../redis/keys.js';
import { numberField } from '../redis/number-field.js';
import { limitAtShare } from '../util/limit-share.js';
import { adaptiveBounds, effectiveDependencyLimit } from './adaptive-limit-policy.js';
import { limitField, type LimitScope } from './permit-scopes.js';

/** Every configured scope with the field its run-time override lives in. */
export function configuredScopes(config: SluiceConfig): { name: string; defaultLimit: number }[] {
  const named = (scope: LimitScope, entries: Record<string, { maxConcurrency: number }>) => Object.entries(entries).map(([n, e]) => ({ name: limitField(scope, n), defaultLimit: e.maxConcurrency }));
  return [
    { name: 'global', defaultLimit: config.limits.global },
    { name: 'class:batch', defaultLimit: limitAtShare(config.limits.global, config.limits.batchShare) },
    ...named('tenant', config.tenants),
    ...named('workflow', config.workflows),
    ...named('dependency', config.dependencies),
  ];
}

/**
 * `sluice_permits_in_use{scope}`, `sluice_permit_limit{scope}` and `sluice_dependency_limit{dependency}`,
 * read from Redis at scrape time (one pipeline per scrape), so every instance reports the
 * cluster-wide truth rather than its own share. The dependency limit is the permit limit at the
 * ramp-up share its breaker's close time gives now (see src/config/ramp-up.ts), held to its
 * adaptive concurrency figure when it has one. While Redis cannot answer, the gauges are left out
 * and the scrape still renders.
 */
export function registerPermitGauges(metrics: Pick<Metrics, 'registry' | 'scrapeCollectors'>, redis: Pick<RedisClient, 'pipeline' | 'hmget'>, keys: RedisKeys, config: SluiceConfig): void {
  const scopes = configuredScopes(config);
  const scopeGauge = (name: string, help: string) => new Gauge({ name, help, labelNames: ['scope'], registers: [metrics.registry] });
  const inUse = scopeGauge('sluice_permits_in_use', 'Permits held now per scope, across all processors');
  const limit = scopeGauge('sluice_permit_limit', 'Effective concurrency limit per scope (config, or the run-time override)');
  const dependencyLimit = new Gauge({ name: 'sluice_dependency_limit', help: 'Concurrency cap of a dependency in force now: its permit limit, lowered while it ramps up after its breaker closed and to its adaptive concurrency figure', labelNames: ['dependency'], registers: [metrics.registry] });
  const dependencies = Object.keys(config.dependencies);
  metrics.scrapeCollectors.add({
    name: 'permits',
    read: async () => {
      // The permit keys share one slot and go in one pipeline; each breaker hash lives in its dependency's slot.
      const pipeline = redis.pipeline().hgetall(keys.permitLimits());
      const now = Date.now();
      for (const s of scopes) pipeline.zcount(keys.permitScope(s.name), now, '+inf');
      for (const d of dependencies) pipeline.hget(keys.adaptiveLimit(d), 'limit');
      const [replies, breakers] = await Promise.all([pipeline.exec(), Promise.all(dependencies.map((d) => redis.hmget(keys.breaker(d), 'state', 'closedAt')))]);
      const results = (replies ?? []).map(([err, v]) => {
        if (err) throw err;
        return v;
      });
      const overrides = results[0] as Record<string, string>;
      const override = (field: string) => (overrides[field] !== undefined ? Number(overrides[field]) : undefined);
      const globalLimit = override('global') ?? config.limits.global;
      const limits = scopes.map((s) => (s.name === 'class:batch' ? limitAtShare(globalLimit, config.limits.batchShare) : (override(s.name) ?? s.defaultLimit)));
      const figures = results.slice(1 + scopes.length) as (string | null)[];
      return {
        inUse: scopes.map((_, i) => Number(results[1 + i])),
        limits,
        dependencyLimits: dependencies.map((d, i) => {
          const [state, closedAt] = breakers[i]!;
          const closed = numberField(closedAt ?? undefined);
          const since = (state ?? 'closed') === 'closed' && closed !== undefined ? now - closed : undefined;
          const atRamp = limitAtShare(limits[scopes.findIndex((s) => s.name === limitField('dependency', d))]!, rampUpShare(config.dependencies[d]!.breaker.rampUp, since));
          return effectiveDependencyLimit(atRamp, adaptiveBounds(config.dependencies[d]!), numberField(figures[i] ?? undefined));
        }),
      };
    },
    show: (snapshot) => {
      scopes.forEach((s, i) => {
        inUse.set({ scope: s.name }, snapshot.inUse[i]!);
        limit.set({ scope: s.name }, snapshot.limits[i]!);
      });
      dependencies.forEach((d, i) => dependencyLimit.set({ dependency: d }, snapshot.dependencyLimits[i]!));
    },
    omit: () => {
      inUse.reset();
      limit.reset();
      dependencyLimit.reset();
    },
  });
}
