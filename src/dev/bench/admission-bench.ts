import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { infraUp } from '../infra/local-infra.js';
import { createLogger } from '../../obs/logger.js';
import { packageRoot } from '../../util/package-root.js';
import { runOpenLoop, type OpenLoopResult } from './open-loop.js';
import { freePort } from '../../util/free-port.js';

export interface AdmissionBenchOptions {
  rates: number[];
  durationSec: number;
  warmupSec: number;
}

const ACCEPT_KEY = 'local-key-a';
const REJECT_KEY = 'local-key-c';
const BODY = JSON.stringify({ workflow: 'support-reply', input: { message: 'Where is order 42?', orderId: '42' } });

/** tenant-a may always enter (the accept path); tenant-c never (after its one token: the reject path). */
function benchConfig(apiPort: number): string {
  const base = parse(readFileSync(join(packageRoot(), 'config', 'local.yaml'), 'utf8')) as Record<string, any>;
  base.localInfra = false;
  base.logLevel = 'warn';
  base.api.port = apiPort;
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

function startChild(script: string, args: string[], env: NodeJS.ProcessEnv): ChildProcess {
  const child = spawn(process.execPath, [join(packageRoot(), 'dist', script), ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'inherit'] });
  child.unref();
  return child;
}

const fmt = (n: number, digits = 2) => n.toFixed(digits).padStart(8);

function row(rate: number, path: string, r: OpenLoopResult, base: OpenLoopResult | undefined): string {
  const statuses = Object.entries(r.statuses).map(([s, n]) => `${s}:${n}`).join(' ');
  const ratio = base ? `${fmt(r.p50Ms / base.p50Ms, 1)}x ${fmt(r.p99Ms / base.p99Ms, 1)}x` : '       -         -';
  return `${String(rate).padStart(6)}  ${path.padEnd(22)} ${fmt(r.p50Ms)} ${fmt(r.p99Ms)} ${fmt(r.maxMs, 1)} ${fmt(r.achievedPerSec, 0)} ${String(r.dropped + r.errors).padStart(6)}  ${ratio}  ${statuses}`;
}

/**
 * `npm run bench admission`: p50/p99 of the reject path (429 after one EVALSHA) and the accept path
 * (two EVALSHA, a Kafka produce with acks=all, a Postgres insert), next to a bare Fastify route with
 * the same validation, at the same fixed open-loop rates in the same run.
 */
export async function benchAdmission(opts: AdmissionBenchOptions): Promise<void> {
  const logger = createLogger('warn');
  const infra = await infraUp({ stateDir: process.env.SLUICE_STATE_DIR ?? '.sluice', logger });
  const [apiPort, barePort] = [await freePort(), await freePort()];
  const sluice = startChild('cli/main.js', ['start', '--config', benchConfig(apiPort), '--roles', 'api'], {
    KAFKA_BROKERS: infra.kafkaBrokers.join(','),
    REDIS_URL: infra.redisUrl,
    DATABASE_URL: infra.databaseUrl,
    SLUICE_NAMESPACE: `bench-${Date.now().toString(36)}.`,
  });
  const bare = startChild('dev/bench/main.js', ['bare-server', '--port', String(barePort)], {});
  try {
    await waitForHttp(`http://127.0.0.1:${apiPort}/healthz`, 60_000);
    await waitForHttp(`http://127.0.0.1:${barePort}/v1/runs`, 10_000);
    const targets = [
      { path: 'bare fastify (baseline)', url: `http://127.0.0.1:${barePort}/v1/runs`, key: ACCEPT_KEY },
      { path: 'reject (429)', url: `http://127.0.0.1:${apiPort}/v1/runs`, key: REJECT_KEY },
      { path: 'accept (202, Kafka ack)', url: `http://127.0.0.1:${apiPort}/v1/runs`, key: ACCEPT_KEY },
    ];
    const load = (url: string, key: string, ratePerSec: number, durationSec: number) =>
      runOpenLoop({ url, ratePerSec, durationSec, body: () => BODY, headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` } });

    for (const t of targets) await load(t.url, t.key, opts.rates[0] ?? 100, opts.warmupSec);
    process.stdout.write(`open-loop, ${opts.durationSec} s per cell, latency from the scheduled send time (ms); ratios are p50 and p99 against the baseline at the same rate\n`);
    process.stdout.write('  rate  path                        p50      p99      max  ach/s  lost   p50 ratio p99 ratio  statuses\n');
    for (const rate of opts.rates) {
      let base: OpenLoopResult | undefined;
      for (const t of targets) {
        const r = await load(t.url, t.key, rate, opts.durationSec);
        process.stdout.write(`${row(rate, t.path, r, base)}\n`);
        base ??= r;
      }
    }
  } finally {
    sluice.kill('SIGTERM');
    bare.kill('SIGTERM');
  }
}
