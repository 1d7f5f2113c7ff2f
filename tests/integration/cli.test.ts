import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/util/package-root.js';
import { createHash } from 'node:crypto';
import { startSluice, testNamespace, writeTestConfig } from './harness.js';

const cli = join(packageRoot(), 'dist', 'cli', 'main.js');
const sluice = (args: string[], env: Record<string, string> = {}) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 30_000 });

describe('the sluice CLI, run as a user would', () => {
  it('prints the validated config with defaults filled in', () => {
    const r = sluice(['config']);
    expect(r.status).toBe(0);
    const cfg = JSON.parse(r.stdout);
    expect(Object.keys(cfg.tenants)).toEqual(['tenant-a', 'tenant-b', 'tenant-c']);
    expect(cfg.kafka.partitions.interactive).toBeGreaterThan(0);
  });

  it('prints no secret: the API key as *** and URLs with their passwords masked', () => {
    const r = sluice(['config'], {
      REDIS_URL: 'redis://:s3cret@cache.internal:6379',
      DATABASE_URL: 'postgresql://sluice:pgs3cret@db.internal:5432/sluice',
      SCHEMA_REGISTRY_URL: 'https://key:regs3cret@registry.internal',
      ANTHROPIC_API_KEY: 'sk-ant-api03-hush',
    });
    expect(r.status).toBe(0);
    expect(r.stdout + r.stderr).not.toMatch(/s3cret|sk-ant-api03-hush/);
    const cfg = JSON.parse(r.stdout);
    expect(cfg.anthropic.apiKey).toBe('***');
    expect(cfg.redis.url).toBe('redis://:***@cache.internal:6379');
    expect(cfg.postgres.url).toBe('postgresql://sluice:***@db.internal:5432/sluice');
    expect(cfg.schemaRegistry.url).toBe('https://key:***@registry.internal/');
  });

  it.each([
    [{ api: { port: 'eighty' } }, 'api.port'],
    [{ workflows: { broken: { steps: [{ id: 'x', kind: 'tool', tool: 'no-such-tool' }] } } }, 'workflows.broken.steps.0.tool'],
    [{ pricing: { models: { 'claude-sonnet-4': { inputPerMillionTokens: -3, outputPerMillionTokens: 15 } } } }, 'pricing.models.claude-sonnet-4.inputPerMillionTokens'],
    [{ dependencies: { anthropic: { adaptiveConcurrency: { min: 1, decreaseFactor: 1.5 } } } }, 'dependencies.anthropic.adaptiveConcurrency.decreaseFactor'],
  ])('exits 2 naming the field when the config is bad (%j)', (override, field) => {
    const r = sluice(['config', '--config', writeTestConfig(override)]);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(field);
  });

  it('names the environment variable a bad value came from, also for `start`', () => {
    const r = sluice(['start', '--roles', 'api'], { SLUICE_API_PORT: '99999' });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/api\.port \(from SLUICE_API_PORT\)/);
  });

  it('refuses a file that is not YAML with a clear message', () => {
    const path = join(mkdtempSync(join(tmpdir(), 'sluice-cli-')), 'not-yaml.yaml');
    writeFileSync(path, 'tenants: [unclosed');
    const r = sluice(['config', '--config', path]);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('is not valid YAML');
  });

  it('reports the local infrastructure as JSON', () => {
    const r = sluice(['infra', 'status']);
    expect(r.status).toBe(0);
    const status = JSON.parse(r.stdout);
    expect(Object.keys(status)).toEqual(expect.arrayContaining(['kafka', 'redis', 'postgres']));
    expect(status.redis.running).toBe(true);
  });
});

describe('the production profile, run as a user would', () => {
  const demoFields = ['tenants.tenant-a.apiKeySha256', 'tenants.tenant-b.apiKeySha256', 'tenants.tenant-c.apiKeySha256', 'api.adminKeySha256', 'roles', 'anthropic.apiKey', 'dependencies.order-lookup.url', 'localInfra'];

  it('refuses to start the demo config, exit 2, naming every field, before touching any infrastructure', () => {
    const r = sluice(['start'], { SLUICE_PROFILE: 'production' });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('sluice: the production profile refuses this configuration:');
    for (const field of demoFields) expect(r.stderr).toContain(`\n  ${field}: `);
    expect(r.stderr).toContain('"local-key-a"');
    // The demo tenant's ingress secret, read from beside the built-in config, is published too.
    expect(r.stderr).toContain('\n  tenants.tenant-a.ingress: holds the published demo ingress secret "local-ingress-secret-a"');
    expect(r.stderr).toContain('SLUICE_PROFILE=dev');
    expect(r.stdout).toBe('');
  });

  it('still prints and validates with `sluice config`, warning what `start` would refuse', () => {
    const r = sluice(['config'], { SLUICE_PROFILE: 'production' });
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout).profile).toBe('production');
    for (const field of demoFields) expect(r.stderr).toContain(`sluice: warning: \`sluice start\` would refuse this under the production profile: ${field}: `);
    expect(sluice(['config']).stderr).toBe('');
  });

  it('starts a config of its own, and says which profile runs', async () => {
    const sha = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');
    const configPath = writeTestConfig({
      profile: 'production',
      api: { adminKeySha256: sha('cli-test-admin') },
      tenants: { 'tenant-a': { apiKeySha256: sha('cli-test-a') }, 'tenant-b': { apiKeySha256: sha('cli-test-b') }, 'tenant-c': { apiKeySha256: sha('cli-test-c') } },
    });
    const proc = await startSluice({ configPath, roles: 'status-sink', namespace: testNamespace('cli-profile') });
    try {
      expect(proc.logs).toContainEqual(expect.objectContaining({ msg: 'production profile', profile: 'production' }));
      expect(proc.stdout()).toContain('Sluice is running (production profile): roles status-sink');
    } finally {
      expect(await proc.stop()).toBe(0);
    }
  });
});
