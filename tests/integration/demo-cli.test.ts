import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { packageRoot } from '../../src/util/package-root.js';
import { TENANT_A_KEY, TENANT_B_KEY, freePort, http, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';

const INGRESS_RUNS = 3;
/**
 * tenant-b's bucket, smaller and slower than the demo config's (60, 10/s), so that the burst's
 * refused submissions, sent again at once, meet an empty bucket and the client's retries show.
 */
const BUCKET = { capacity: 30, refillPerSec: 5 };
const BURST = 60;
/** The demo's own bound on each wait, and the test's bound on the whole demo. */
const DEMO_TIMEOUT_MS = 60_000;
const DEMO_KILL_MS = 240_000;

/** `sluice demo` run as a user would after `npm start`: the compiled CLI against a running Sluice with the demo config. */
describe('sluice demo against a running Sluice', () => {
  const namespace = testNamespace('demo');
  const stateDir = mkdtempSync(join(tmpdir(), 'sluice-demo-'));
  let sluice: SluiceProcess;
  let api: string;

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    sluice = await startSluice({
      // The demo tenant's published ingress secret, the one the demo signs with by default.
      configPath: writeTestConfig({ api: { port: apiPort }, simulator: { port: simPort }, tenants: { 'tenant-a': { ingress: { secretFile: join(packageRoot(), 'config', 'demo-ingress-secret-tenant-a') } }, 'tenant-b': { admission: { bucket: BUCKET } } } }),
      roles: 'provider-sim,status-sink,dlq-sink,processor,ingress,api',
      namespace,
      env: { SLUICE_STATE_DIR: stateDir },
    });
    api = `http://127.0.0.1:${apiPort}`;
  }, 120_000);

  afterAll(async () => {
    expect(await sluice?.stop()).toBe(0);
  });

  it('exits 0 and names runs that are completed in the API', async () => {
    const demo = await runDemo(['--api-url', api, '--runs', String(INGRESS_RUNS), '--burst', String(BURST), '--timeout-ms', String(DEMO_TIMEOUT_MS)]);
    expect(demo.code, `stdout:\n${demo.stdout}\nstderr:\n${demo.stderr}`).toBe(0);
    expect(demo.stdout).toContain('everything ended as expected');
    expect(demo.stdout).toMatch(/the same key again: run (\S+) \(Idempotent-Replayed: true\)/);
    expect(demo.stdout).toMatch(/\d+ × 429 rate_limited, Retry-After \d+ s/);
    expect(demo.stdout).toMatch(/refused with Retry-After \d+ s, sent again \d+\.\d\d s later/);
    expect(demo.stdout).toMatch(/[1-9]\d* retries, 0 sooner than their Retry-After/);

    const completedA = completedRuns(demo.stdout, 'tenant-a');
    const completedB = completedRuns(demo.stdout, 'tenant-b');
    // The followed run and every ingress run; every burst submission, admitted at once or after its retries.
    expect(completedA).toHaveLength(1 + INGRESS_RUNS);
    expect(completedB).toHaveLength(BURST);
    expect(new Set([...completedA, ...completedB]).size).toBe(1 + INGRESS_RUNS + BURST);
    for (const [key, runs] of [[TENANT_A_KEY, completedA], [TENANT_B_KEY, completedB]] as const) {
      for (const runId of runs) {
        const run = await http(`${api}/v1/runs/${runId}`, { key });
        expect(run.status, runId).toBe(200);
        expect(run.body.status, runId).toBe('completed');
      }
    }
  }, DEMO_KILL_MS + 60_000);

  it('exits 1 naming what failed when the Kafka ingress refuses its signature', async () => {
    const demo = await runDemo(['--api-url', api, '--runs', '1', '--burst', String(BURST), '--timeout-ms', '15000', '--ingress-secret', 'not-the-secret']);
    expect(demo.code, demo.stdout).toBe(1);
    // A forged signature is dead-lettered by the ingress, never run: no outcome comes.
    expect(demo.stdout).toMatch(/NOT as expected:\n(\s+- .*\n)*\s+- Kafka ingress: .*no outcome for request \S+ within 15000 ms/);
    expect(completedRuns(demo.stdout, 'tenant-a')).toHaveLength(1);
  }, DEMO_KILL_MS);

  function runDemo(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const child = spawn(process.execPath, [join(packageRoot(), 'dist', 'cli', 'main.js'), 'demo', ...args], {
      cwd: packageRoot(),
      env: { ...process.env, KAFKA_BROKERS: inject('infra').kafkaBrokers.join(','), SLUICE_NAMESPACE: namespace, SLUICE_STATE_DIR: stateDir },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), DEMO_KILL_MS);
    return new Promise((resolve) => child.once('exit', (code) => (clearTimeout(timer), resolve({ code, stdout, stderr }))));
  }
});

function completedRuns(stdout: string, tenant: string): string[] {
  const line = new RegExp(`completed runs of ${tenant}: (.*)`).exec(stdout);
  return line && line[1] !== 'none' ? line[1]!.trim().split(/\s+/) : [];
}
