import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { stringify } from 'yaml';
import { infraUp } from '../infra/local-infra.js';
import { createLogger } from '../../obs/logger.js';
import { packageRoot } from '../../util/package-root.js';
import { localConfig } from './bench-harness.js';
import { runOpenLoop, type OpenLoopResult } from './open-loop.js';
import { freePort } from '../../util/free-port.js';
import { processCpuMs } from './cpu-time.js';

export const ADMISSION_TARGETS = ['baseline', 'reject', 'accept'] as const;
export type AdmissionTarget = (typeof ADMISSION_TARGETS)[number];

export interface AdmissionBenchOptions {
  rates: number[];
  durationSec: number;
  warmupSec: number;
  /** Which paths to measure, in this order of the table. */
  targets: readonly AdmissionTarget[];
  /**
   * The Sluice API processes measured side by side, each on its own port and namespace:
   * `write-behind` / `no-write-behind` (`api.admissionRows.writeBehind`), or `checkout:<dir>`,
   * another built checkout's `dist/cli/main.js` with the same config minus `api.admissionRows`
   * (the main branch, say). The reject and accept paths are measured on each.
   */
  variants: readonly string[];
  /** Times every path is measured per rate, the paths taking turns, so a change in machine load hits them alike. */
  rounds: number;
  /** When set, Sluice's API runs with `node --cpu-prof` and writes its profile here on exit. */
  cpuProfDir?: string;
}

interface Variant {
  label: string;
  cli: string;
  /** Unset for another checkout, whose schema may not know the field. */
  writeBehind?: boolean;
}

export function parseVariant(v: string): Variant {
  if (v === 'write-behind' || v === 'no-write-behind') return { label: v, cli: join(packageRoot(), 'dist', 'cli', 'main.js'), writeBehind: v === 'write-behind' };
  if (v.startsWith('checkout:') && v.length > 'checkout:'.length) {
    const dir = v.slice('checkout:'.length);
    return { label: basename(dir), cli: join(dir, 'dist', 'cli', 'main.js') };
  }
  throw new Error(`not write-behind, no-write-behind or checkout:<dir>: ${v}`);
}

const ACCEPT_KEY = 'local-key-a';
const REJECT_KEY = 'local-key-c';
const BODY = JSON.stringify({ workflow: 'support-reply', input: { message: 'Where is order 42?', orderId: '42' } });

/** tenant-a may always enter (the accept path); tenant-c never (after its one token: the reject path). */
function benchConfig(apiPort: number, writeBehind: boolean | undefined): string {
  const base = localConfig();
  base.localInfra = false;
  base.logLevel = 'warn';
  base.api.port = apiPort;
  if (writeBehind !== undefined) base.api.admissionRows = { ...base.api.admissionRows, writeBehind };
  base.admission = { maxBacklog: 100_000_000 };
  base.tenants['tenant-a'].admission = { bucket: { capacity: 1_000_000, refillPerSec: 1_000_000 }, maxBacklog: 10_000_000 };
  base.tenants['tenant-c'].admission = { bucket: { capacity: 1, refillPerSec: 0 } };
  const path = join(mkdtempSync(join(tmpdir(), 'sluice-bench-')), 'config.yaml');
  writeFileSync(path, stringify(base));
  return path;
}

export async function waitForHttp(url: string, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    try {
      await fetch(url, { signal: AbortSignal.timeout(1_000) });
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  throw new Error(`${url} did not answer within ${timeoutMs} ms`);
}

function startChild(script: string, args: string[], env: NodeJS.ProcessEnv, nodeArgs: string[] = []): ChildProcess {
  const child = spawn(process.execPath, [...nodeArgs, script, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'inherit'] });
  child.unref();
  return child;
}

const fmt = (n: number, digits = 2) => n.toFixed(digits).padStart(8);

interface Cell {
  result: OpenLoopResult;
  /** CPU ms of the process serving the path, per completed request. */
  cpuMsPerRequest: number;
  load1: number;
}

function row(rate: number, path: string, { result: r, cpuMsPerRequest, load1 }: Cell, base: OpenLoopResult | undefined): string {
  const statuses = Object.entries(r.statuses).map(([s, n]) => `${s}:${n}`).join(' ');
  const ratio = base ? `${fmt(r.p50Ms / base.p50Ms, 1)}x ${fmt(r.p99Ms / base.p99Ms, 1)}x` : '       -         -';
  return `${String(rate).padStart(6)}  ${path.padEnd(30)} ${fmt(r.p50Ms)} ${fmt(r.p99Ms)} ${fmt(r.maxMs, 1)} ${fmt(r.achievedPerSec, 0)} ${String(r.dropped + r.errors).padStart(6)} ${fmt(cpuMsPerRequest, 3)} ${fmt(load1)}  ${ratio}  ${statuses}`;
}

/**
 * `npm run bench admission`: p50/p99 of the reject path (429 after one EVALSHA) and the accept path
 * (two EVALSHA, a Kafka produce with acks=all, the read-model row queued or, with write-behind off,
 * inserted), next to a bare Fastify route with the same validation, at the same fixed open-loop
 * rates in the same run, with the CPU each path's process spent per request.
 */
export async function benchAdmission(opts: AdmissionBenchOptions): Promise<void> {
  const logger = createLogger('warn');
  const infra = await infraUp({ stateDir: process.env.SLUICE_STATE_DIR ?? '.sluice', logger });
  const variants = opts.variants.map(parseVariant);
  const barePort = await freePort();
  const apis: { variant: Variant; port: number; child: ChildProcess }[] = [];
  for (const variant of variants) {
    const port = await freePort();
    const child = startChild(
      variant.cli,
      ['start', '--config', benchConfig(port, variant.writeBehind), '--roles', 'api'],
      {
        KAFKA_BROKERS: infra.kafkaBrokers.join(','),
        REDIS_URL: infra.redisUrl,
        DATABASE_URL: infra.databaseUrl,
        SLUICE_NAMESPACE: `bench-${Date.now().toString(36)}-${apis.length}.`,
      },
      opts.cpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', opts.cpuProfDir] : [],
    );
    apis.push({ variant, port, child });
  }
  const bare = startChild(join(packageRoot(), 'dist', 'dev', 'bench', 'main.js'), ['bare-server', '--port', String(barePort)], {});
  try {
    for (const api of apis) await waitForHttp(`http://127.0.0.1:${api.port}/healthz`, 60_000);
    await waitForHttp(`http://127.0.0.1:${barePort}/v1/runs`, 10_000);
    const url = (port: number) => `http://127.0.0.1:${port}/v1/runs`;
    const paths: Record<AdmissionTarget, { path: string; url: string; key: string; pid: number }[]> = {
      baseline: [{ path: 'bare fastify (baseline)', url: url(barePort), key: ACCEPT_KEY, pid: bare.pid! }],
      reject: apis.map((api) => ({ path: `reject (429) ${api.variant.label}`, url: url(api.port), key: REJECT_KEY, pid: api.child.pid! })),
      accept: apis.map((api) => ({ path: `accept (202) ${api.variant.label}`, url: url(api.port), key: ACCEPT_KEY, pid: api.child.pid! })),
    };
    const targets = opts.targets.flatMap((t) => paths[t]);
    const load = (url: string, key: string, ratePerSec: number, durationSec: number) =>
      runOpenLoop({ url, ratePerSec, durationSec, body: () => BODY, headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` } });

    for (const t of targets) await load(t.url, t.key, opts.rates[0] ?? 100, opts.warmupSec);
    process.stdout.write(`open-loop, ${opts.durationSec} s per cell, ${opts.rounds} round(s) of the paths taking turns per rate, latency from the scheduled send time (ms); ratios are p50 and p99 against the first path of the round\n`);
    process.stdout.write('cpu ms/req: CPU time (user+system) of the process serving the path over the cell / requests completed; load1: 1-minute load average at the end of the cell\n');
    process.stdout.write('  rate  path                                p50      p99      max  ach/s  lost cpu ms/req   load1   p50 ratio p99 ratio  statuses\n');
    for (const rate of opts.rates) {
      for (let round = 0; round < opts.rounds; round++) {
        let base: OpenLoopResult | undefined;
        for (const t of targets) {
          const cpuBefore = processCpuMs(t.pid);
          const result = await load(t.url, t.key, rate, opts.durationSec);
          const cell = { result, cpuMsPerRequest: (processCpuMs(t.pid) - cpuBefore) / Math.max(1, result.completed), load1: loadavg()[0]! };
          process.stdout.write(`${row(rate, t.path, cell, base)}\n`);
          base ??= result;
        }
      }
    }
  } finally {
    // Waited for (bounded), so a CPU profile is written before the bench returns.
    const exited = Promise.all(apis.map(({ child }) => new Promise((r) => child.once('exit', r))));
    for (const { child } of apis) child.kill('SIGTERM');
    bare.kill('SIGTERM');
    await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000).unref())]);
  }
}
