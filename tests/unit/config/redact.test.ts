import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../../src/config/load.js';
import { redactConfig } from '../../../src/config/redact.js';
import { startBanner } from '../../../src/cli/banner.js';
import type { Metrics } from '../../../src/obs/metrics.js';

const sha = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');
const SECRETS = /s3cret|pgsecret|regsecret|sk-ant-hush|proxysecret|toolsecret|simsecret|pubsecret/;

/** Every field that can hold a secret, holding one. */
function secretDoc(): Record<string, any> {
  return {
    redis: { url: 'redis://:s3cret@cache:6379' },
    postgres: { url: 'postgresql://app:pgsecret@db:5432/sluice?sslmode=require' },
    schemaRegistry: { url: 'https://key:regsecret@registry.example' },
    anthropic: { apiKey: 'sk-ant-hush', baseUrl: 'https://user:proxysecret@llm-proxy.example/v1' },
    simulator: { url: 'http://sim:simsecret@sim:8089' },
    api: { adminKeySha256: sha('admin'), publicUrl: 'https://u:pubsecret@sluice.example' },
    tenants: { t1: { apiKeySha256: sha('t1') } },
    dependencies: {
      anthropic: { kind: 'llm', model: 'claude', timeouts: { connectMs: 100, readMs: 1000, totalMs: 2000 }, maxConcurrency: 4 },
      crm: { kind: 'tool', url: 'https://bot:toolsecret@crm.example/lookup', timeouts: { connectMs: 100, readMs: 1000, totalMs: 2000 }, maxConcurrency: 2 },
      local: { kind: 'tool', url: '/tools/order-lookup', timeouts: { connectMs: 100, readMs: 1000, totalMs: 2000 }, maxConcurrency: 2 },
    },
    workflows: { wf: { steps: [{ id: 'think', kind: 'llm', system: 'be brief' }] } },
  };
}

describe('redactConfig', () => {
  const config = parseConfig(secretDoc());
  const shown = redactConfig(config);

  it('shows the API key as *** and every URL with its password masked', () => {
    expect(shown.anthropic).toEqual({ apiKey: '***', baseUrl: 'https://user:***@llm-proxy.example/v1' });
    expect(shown.redis.url).toBe('redis://:***@cache:6379');
    expect(shown.postgres.url).toBe('postgresql://app:***@db:5432/sluice?sslmode=require');
    expect(shown.schemaRegistry.url).toBe('https://key:***@registry.example/');
    expect(shown.simulator.url).toBe('http://sim:***@sim:8089/');
    expect(shown.api.publicUrl).toBe('https://u:***@sluice.example/');
    expect(shown.dependencies.crm).toMatchObject({ url: 'https://bot:***@crm.example/lookup' });
    expect(JSON.stringify(shown)).not.toMatch(SECRETS);
  });

  it('leaves everything else as it is: key digests, simulator paths, numbers, lists', () => {
    expect(shown.dependencies.local).toEqual(config.dependencies.local);
    expect(shown.tenants).toEqual(config.tenants);
    expect(shown.api.adminKeySha256).toBe(config.api.adminKeySha256);
    expect(shown.kafka).toEqual(config.kafka);
    expect(shown.roles).toEqual(config.roles);
    expect(shown.workflows).toEqual(config.workflows);
  });

  it('changes nothing in a config without secrets, and never the config it was given', () => {
    const plain = parseConfig({ ...secretDoc(), redis: {}, postgres: {}, schemaRegistry: {}, anthropic: {}, simulator: {}, api: { adminKeySha256: sha('admin') }, dependencies: { ...secretDoc().dependencies, crm: { ...secretDoc().dependencies.crm, url: 'https://crm.example/lookup' } } });
    expect(redactConfig(plain)).toEqual(plain);
    expect(config.anthropic.apiKey).toBe('sk-ant-hush');
    expect(config.redis.url).toBe('redis://:s3cret@cache:6379');
  });
});

describe('startBanner', () => {
  it('shows where Redis and Postgres are without their passwords', () => {
    const banner = startBanner(parseConfig(secretDoc()), { roles: ['api'], apiUrl: 'http://127.0.0.1:8080', metrics: {} as Metrics, stop: async () => undefined });
    expect(banner).toContain('Redis redis://:***@cache:6379');
    expect(banner).toContain('Postgres postgresql://app:***@db:5432/sluice?sslmode=require');
    expect(banner).not.toMatch(SECRETS);
  });
});
