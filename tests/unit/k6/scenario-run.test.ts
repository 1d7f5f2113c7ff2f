import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { packageRoot } from '../../../src/util/package-root.js';
import { calls, respondWith, simulatorHas } from './stubs/k6-http.js';
import { results, sleptSec } from './stubs/k6.js';
import { samples } from './stubs/k6-metrics.js';

const k6Dir = join(packageRoot(), 'k6');
const globals = globalThis as any;
// k6's init context: `open` reads a file beside the script, `__ENV` holds the environment.
globals.open = (path: string) => readFileSync(join(k6Dir, path), 'utf8');
globals.__ENV = {};

interface ScenarioFunctions {
  setup(): { baselines: Record<string, unknown> };
  submit(): void;
  setFault(data: { baselines: Record<string, unknown> }): void;
  teardown(data: { baselines: Record<string, unknown> }): void;
}
const { scenarioRun }: { scenarioRun(def: unknown): ScenarioFunctions } = await import('../../../k6/lib/scenario-run.js' as string);

function definition(name: string): any {
  return JSON.parse(readFileSync(join(k6Dir, 'scenarios', `${name}.json`), 'utf8'));
}

/** The scenario's functions as k6 builds them at init under `env`; `__ENV` then stays as given (a scenario's own). */
function run(name: string, env: Record<string, string>): ScenarioFunctions {
  globals.__ENV = env;
  return scenarioRun(definition(name));
}

const tenantA = { STREAM_TENANT: 'tenant-a', STREAM_WORKFLOW: 'support-reply', STREAM_CLASS: 'interactive' };

beforeEach(() => {
  calls.length = 0;
  results.length = 0;
  sleptSec.length = 0;
  for (const name of Object.keys(samples)) delete samples[name];
});

describe('a scenario script', () => {
  it('exports options and every function its scenarios run', async () => {
    globals.__ENV = { SIM_URL: 'http://127.0.0.1:8089' };
    const script = await import('../../../k6/avalanche.js' as string);
    const execs = new Set(Object.values(script.options.scenarios).map((s: any) => s.exec));
    expect([...execs].sort()).toEqual(['setFault', 'submit']);
    for (const name of [...execs, 'setup', 'teardown']) expect(typeof script[name], name).toBe('function');
  });
});

describe('submit', () => {
  it('sends the stream’s run with its tenant’s key and class, and resends after refusals at the scaled delays', () => {
    respondWith(429, 503, 202);
    run('avalanche', { ...tenantA, TIME_SCALE: '2' }).submit();
    expect(calls.map((c) => c.url)).toEqual(Array(3).fill('http://127.0.0.1:8080/v1/runs'));
    expect(calls[0]!.params.headers.Authorization).toBe('Bearer local-key-a');
    expect(calls[0]!.params.tags).toEqual({ call: 'submit' });
    expect(calls[0]!.params.responseCallback).toEqual({ expected: [202, 429, 503] });
    expect(JSON.parse(calls[0]!.body!)).toMatchObject({ workflow: 'support-reply', class: 'interactive', deadlineMs: 2_000 });
    expect(sleptSec).toEqual([0.5, 1]);
    expect(results.map((r) => r.tags)).toEqual(Array(3).fill({ kind: 'contract' }));
    expect(results.every((r) => Object.values(r.checks).every(Boolean))).toBe(true);
    expect(samples.interactive_answer_ms).toHaveLength(1);
  });

  it('gives up after the last delay, resends after a transport error, and not after another answer', () => {
    respondWith(503, 0, 503, 503, 503);
    run('avalanche', tenantA).submit();
    expect(sleptSec).toEqual([1, 2, 4, 8]);
    expect(calls).toHaveLength(5);
    calls.length = 0;
    respondWith(400);
    run('avalanche', tenantA).submit();
    expect(calls).toHaveLength(1);
  });

  it('sends once without client retries, and counts refusals as contract answers but a 500 not', () => {
    respondWith(503);
    const baseline = run('baseline', { STREAM_TENANT: 'tenant-b', STREAM_WORKFLOW: 'report-digest', STREAM_CLASS: 'batch', API_KEYS: '{"tenant-a":"a","tenant-b":"b","tenant-c":"c"}' });
    baseline.submit();
    expect(calls).toHaveLength(1);
    expect(calls[0]!.params.headers.Authorization).toBe('Bearer b');
    expect(Object.values(results.at(-1)!.checks)).toEqual([true, true]);
    expect(samples.batch_answer_ms).toHaveLength(1);
    respondWith(500);
    baseline.submit();
    expect(results.at(-1)!.checks['answer follows the overload contract']).toBe(false);
  });

  it('refuses to start when API_KEYS lacks a tenant of the scenario', () => {
    expect(() => run('baseline', { API_KEYS: '{"tenant-a":"a"}' })).toThrow('API_KEYS has no key for tenant-b, tenant-c');
  });
});

describe('faults', () => {
  const anthropic = { latencyMs: 50, jitterMs: 20, errorRate: 0, hang: false };
  const sim = { SIM_URL: 'http://127.0.0.1:8089' };

  it('reads the faulted targets’ profiles in setup, puts each window’s patch, and puts the profile back after', () => {
    simulatorHas({ anthropic, report: { latencyMs: 0, jitterMs: 0, errorRate: 0, hang: false } });
    const data = run('avalanche', sim).setup();
    expect(calls[0]).toMatchObject({ method: 'GET', url: 'http://127.0.0.1:8089/admin/faults', params: { headers: { Authorization: 'Bearer local-admin-key' } } });
    expect(data).toEqual({ baselines: { anthropic } });

    run('avalanche', { ...sim, FAULT_TARGET: 'anthropic', FAULT_PATCH: '{"errorStatus":429,"errorRate":0.5}' }).setFault(data);
    run('avalanche', { ...sim, FAULT_TARGET: 'anthropic' }).setFault(data);
    const puts = calls.filter((c) => c.method === 'PUT');
    expect(puts.map((c) => c.url)).toEqual(Array(2).fill('http://127.0.0.1:8089/admin/faults'));
    expect(puts.map((c) => JSON.parse(c.body!))).toEqual([
      { target: 'anthropic', errorStatus: 429, errorRate: 0.5 },
      { target: 'anthropic', rateLimit: null, ...anthropic },
    ]);
  });

  it('runs without faults when SIM_URL is not set, and says so', () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    expect(run('avalanche', {}).setup()).toEqual({ baselines: {} });
    expect(warn).toHaveBeenCalledWith(expect.stringContaining('SIM_URL is not set'));
    expect(calls).toEqual([]);
    warn.mockRestore();
  });

  it('puts every faulted target back in teardown', () => {
    run('avalanche', sim).teardown({ baselines: { anthropic } });
    expect(calls.map((c) => JSON.parse(c.body!))).toEqual([{ target: 'anthropic', rateLimit: null, ...anthropic }]);
  });
});
