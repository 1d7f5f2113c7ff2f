import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/util/package-root.js';
import { writeTestConfig } from './harness.js';

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

  it.each([
    [{ api: { port: 'eighty' } }, 'api.port'],
    [{ workflows: { broken: { steps: [{ id: 'x', kind: 'tool', tool: 'no-such-tool' }] } } }, 'workflows.broken.steps.0.tool'],
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
