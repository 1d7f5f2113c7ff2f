import { createHash } from 'node:crypto';

export const sha = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');

/** Every secret `secretDoc` holds: none of them may be shown. */
export const SECRETS = /s3cret|pgsecret|regsecret|sk-ant-hush|proxysecret|toolsecret|simsecret|pubsecret/;

/** Every field that can hold a secret, holding one. */
export function secretDoc(): Record<string, any> {
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
