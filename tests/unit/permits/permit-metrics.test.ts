import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import { configuredScopes } from '../../../src/permits/permit-metrics.js';

describe('configuredScopes', () => {
  it('lists global, the batch share and every configured tenant, workflow and dependency with its default limit', () => {
    const config = loadConfig({ env: {} });
    const scopes = Object.fromEntries(configuredScopes(config).map((s) => [s.name, s.defaultLimit]));
    expect(scopes.global).toBe(config.limits.global);
    expect(scopes['class:batch']).toBe(Math.floor(config.limits.global * config.limits.batchShare));
    expect(scopes['tenant:tenant-a']).toBe(config.tenants['tenant-a']!.maxConcurrency);
    expect(scopes['workflow:report-digest']).toBe(config.workflows['report-digest']!.maxConcurrency);
    expect(scopes['dependency:anthropic']).toBe(config.dependencies.anthropic!.maxConcurrency);
    expect(Object.keys(scopes)).toHaveLength(2 + 3 + 2 + 4);
  });
});
