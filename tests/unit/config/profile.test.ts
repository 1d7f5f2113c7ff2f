import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, parseConfig } from '../../../src/config/load.js';
import { readFileSync } from 'node:fs';
import { DEMO_INGRESS_SECRETS, DEMO_KEYS, demoSecretProblems, llmFromSimulator, productionProblems, profileError } from '../../../src/config/profile.js';
import { readIngressSecrets } from '../../../src/ingress/ingress-secrets.js';

const sha = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');
const timeouts = { connectMs: 100, readMs: 1000, totalMs: 2000 };

/** A config the production profile accepts; each test changes one thing. */
function readyDoc(): Record<string, any> {
  return {
    roles: ['api', 'processor', 'status-sink', 'dlq-sink'],
    anthropic: { apiKey: 'sk-ant-real' },
    api: { adminKeySha256: sha('a-real-admin-key') },
    tenants: { shop: { apiKeySha256: sha('a-real-shop-key') }, bank: { apiKeySha256: sha('a-real-bank-key') } },
    dependencies: {
      anthropic: { kind: 'llm', model: 'claude-sonnet-4-6', timeouts, maxConcurrency: 4 },
      crm: { kind: 'tool', url: 'https://crm.internal/lookup', timeouts, maxConcurrency: 2 },
    },
    workflows: {
      answer: {
        steps: [
          { id: 'think', kind: 'llm', system: 'be brief' },
          { id: 'look', kind: 'tool', tool: 'crm' },
        ],
      },
    },
  };
}

const problemsOf = (doc: Record<string, any>) => productionProblems(parseConfig(doc));
const fieldsOf = (doc: Record<string, any>) => problemsOf(doc).map((p) => p.field);

describe('productionProblems', () => {
  it('accepts a production-ready config, and production is the default profile', () => {
    const config = parseConfig(readyDoc());
    expect(config.profile).toBe('production');
    expect(productionProblems(config)).toEqual([]);
  });

  it('names every problem of the built-in demo config at once, in a fixed order', () => {
    const demo = loadConfig({ env: { SLUICE_PROFILE: 'production' } });
    expect(productionProblems(demo).map((p) => p.field)).toEqual([
      'tenants.tenant-a.apiKeySha256',
      'tenants.tenant-b.apiKeySha256',
      'tenants.tenant-c.apiKeySha256',
      'api.adminKeySha256',
      'roles',
      'anthropic.apiKey',
      'dependencies.order-lookup.url',
      'dependencies.kb-search.url',
      'dependencies.report.url',
      'dependencies.notify.url',
      'localInfra',
    ]);
  });

  it('refuses nothing under the dev profile, which the built-in config chooses', () => {
    const demo = loadConfig({ env: {} });
    expect(demo.profile).toBe('dev');
    expect(productionProblems(demo)).toEqual([]);
    expect(problemsOf({ ...readyDoc(), profile: 'dev', localInfra: true, roles: ['provider-sim', 'processor'], anthropic: {} })).toEqual([]);
  });

  it.each(DEMO_KEYS)('refuses the published key %s as a tenant key, naming the tenant and the key', (key) => {
    const doc = readyDoc();
    doc.tenants.bank.apiKeySha256 = sha(key);
    expect(problemsOf(doc)).toEqual([
      { field: 'tenants.bank.apiKeySha256', message: `is the digest of the published demo key "${key}": anyone can use it; give it a key of its own` },
    ]);
  });

  it.each(DEMO_KEYS)('refuses the published key %s as the admin key', (key) => {
    const doc = readyDoc();
    doc.api.adminKeySha256 = sha(key);
    expect(problemsOf(doc)).toEqual([{ field: 'api.adminKeySha256', message: `is the digest of the published demo key "${key}": anyone can use it; give it a key of its own` }]);
  });

  it('knows exactly the keys config/local.yaml publishes', () => {
    const demo = loadConfig({ env: {} });
    const published = [...Object.values(demo.tenants).map((t) => t.apiKeySha256), demo.api.adminKeySha256];
    expect(new Set(DEMO_KEYS.map(sha))).toEqual(new Set(published));
  });

  it.each([
    [['api', 'processor', 'status-sink', 'dlq-sink', 'provider-sim']],
    [['provider-sim']],
    [['api', 'provider-sim']],
  ])('refuses the provider-sim role among %j', (roles) => {
    const doc = readyDoc();
    doc.roles = roles;
    expect(problemsOf(doc)).toEqual([
      { field: 'roles', message: 'include provider-sim, which answers LLM and tool calls with made-up data; list the others (e.g. SLUICE_ROLES=api,processor,status-sink,dlq-sink,lag-monitor)' },
    ]);
  });

  it('refuses the default roles, which include provider-sim', () => {
    const doc = readyDoc();
    delete doc.roles;
    expect(fieldsOf(doc)).toEqual(['roles']);
  });

  it('refuses a processor that would answer LLM steps from the simulator', () => {
    const doc = readyDoc();
    doc.anthropic = {};
    expect(problemsOf(doc)).toEqual([
      { field: 'anthropic.apiKey', message: 'is not set, so LLM steps would be answered by the provider simulator; set ANTHROPIC_API_KEY (or anthropic.baseUrl for an endpoint of your own)' },
    ]);
  });

  it('accepts an LLM endpoint of the operator’s choosing instead of a key', () => {
    const doc = readyDoc();
    doc.anthropic = { baseUrl: 'https://llm-gateway.internal' };
    expect(problemsOf(doc)).toEqual([]);
  });

  it('does not ask for an LLM where none is called: no processor role, or no LLM step', () => {
    const apiOnly = { ...readyDoc(), roles: ['api', 'status-sink'], anthropic: {} };
    expect(problemsOf(apiOnly)).toEqual([]);
    const toolsOnly = readyDoc();
    toolsOnly.anthropic = {};
    toolsOnly.workflows.answer.steps = [{ id: 'look', kind: 'tool', tool: 'crm' }];
    expect(problemsOf(toolsOnly)).toEqual([]);
  });

  it('refuses each tool a workflow calls on a simulator path, for a processor', () => {
    const doc = readyDoc();
    doc.dependencies.crm.url = '/tools/order-lookup';
    doc.dependencies.notify = { kind: 'tool', url: '/tools/notify', timeouts, maxConcurrency: 1 };
    doc.workflows.answer.steps.push({ id: 'tell', kind: 'tool', tool: 'notify' }, { id: 'tell-again', kind: 'tool', tool: 'notify' });
    expect(problemsOf(doc)).toEqual([
      { field: 'dependencies.crm.url', message: "is a provider-simulator path (/tools/order-lookup); give the tool's http(s) URL" },
      { field: 'dependencies.notify.url', message: "is a provider-simulator path (/tools/notify); give the tool's http(s) URL" },
    ]);
  });

  it('leaves simulator paths alone where nothing calls them: an unused tool, or no processor role', () => {
    const unused = readyDoc();
    unused.dependencies.spare = { kind: 'tool', url: '/tools/spare', timeouts, maxConcurrency: 1 };
    expect(problemsOf(unused)).toEqual([]);
    const apiOnly = readyDoc();
    apiOnly.roles = ['api'];
    apiOnly.dependencies.crm.url = '/tools/order-lookup';
    expect(problemsOf(apiOnly)).toEqual([]);
  });

  it('refuses local infrastructure', () => {
    expect(problemsOf({ ...readyDoc(), localInfra: true })).toEqual([
      { field: 'localInfra', message: 'starts single-node Kafka, Redis and Postgres on this machine for development; set it to false and point KAFKA_BROKERS, REDIS_URL and DATABASE_URL at your own' },
    ]);
  });

  it('follows SLUICE_PROFILE over the file, both ways', () => {
    expect(parseConfig({ ...readyDoc(), profile: 'production' }, { SLUICE_PROFILE: 'dev' }).profile).toBe('dev');
    const demo = loadConfig({ env: { SLUICE_PROFILE: 'production' } });
    expect(demo.profile).toBe('production');
  });
});

describe('demoSecretProblems', () => {
  const readBuiltIn = (env: Record<string, string> = {}) => {
    const config = loadConfig({ env });
    return { config, secrets: readIngressSecrets(config, { env: {}, readFile: (file) => readFileSync(file) }) };
  };

  it('finds the demo secret of the built-in config beside it, wherever Sluice starts, and allows it under dev', () => {
    const { config, secrets } = readBuiltIn();
    expect([...secrets.keys()]).toEqual(['tenant-a']);
    expect(secrets.get('tenant-a')!.toString('utf8')).toBe(DEMO_INGRESS_SECRETS[0]);
    expect(demoSecretProblems(config, secrets)).toEqual([]);
  });

  it('refuses a published demo secret under production, naming the tenant, and a secret of its own not', () => {
    const { config, secrets } = readBuiltIn({ SLUICE_PROFILE: 'production' });
    expect(demoSecretProblems(config, secrets)).toEqual([
      { field: 'tenants.tenant-a.ingress', message: `holds the published demo ingress secret "${DEMO_INGRESS_SECRETS[0]}": anyone can sign for this tenant; give it a secret of its own` },
    ]);
    expect(demoSecretProblems(config, new Map([['tenant-a', Buffer.from('a secret of its own, long enough')]]))).toEqual([]);
  });
});

describe('llmFromSimulator', () => {
  it('is true only for a processor calling an LLM with neither a key nor an endpoint', () => {
    const doc = readyDoc();
    doc.anthropic = {};
    expect(llmFromSimulator(parseConfig(doc))).toBe(true);
    expect(llmFromSimulator(parseConfig({ ...doc, anthropic: { apiKey: 'sk-ant-x' } }))).toBe(false);
    expect(llmFromSimulator(parseConfig({ ...doc, anthropic: { baseUrl: 'http://127.0.0.1:8089' } }))).toBe(false);
    expect(llmFromSimulator(parseConfig({ ...doc, roles: ['api'] }))).toBe(false);
  });

  it('does not depend on the profile: the dev processor says so too', () => {
    const doc = { ...readyDoc(), profile: 'dev', anthropic: {} };
    expect(llmFromSimulator(parseConfig(doc))).toBe(true);
  });
});

describe('profileError', () => {
  it('is a config error naming every field, one line each, and how to choose dev', () => {
    const err = profileError([
      { field: 'roles', message: 'include provider-sim' },
      { field: 'localInfra', message: 'starts things' },
    ]);
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.fields).toEqual(['roles', 'localInfra']);
    expect(err.message).toBe(
      'the production profile refuses this configuration:\n  roles: include provider-sim\n  localInfra: starts things\nFor a local demo choose the dev profile: profile: dev in the file, or SLUICE_PROFILE=dev.',
    );
  });
});
