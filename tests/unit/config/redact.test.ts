import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../../src/config/load.js';
import { redactConfig } from '../../../src/config/redact.js';
import { SECRETS, secretDoc, sha } from './secret-config.js';

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
