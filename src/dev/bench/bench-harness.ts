/**
 * What every end-to-end bench stands on: the infrastructure, tracked child processes (the
 * simulator, Sluice, workers), their configuration files and environment, and metrics scrapes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { stringify } from 'yaml';
import { builtInConfigDocument } from '../../config/load.js';
import { infraUp } from '../infra/local-infra.js';
import { createLogger, type Logger } from '../../obs/logger.js';
import { packageRoot } from '../../util/package-root.js';

const STOP_GRACE_MS = 25_000;

/** The API keys of config/local.yaml's demo tenants, by tenant. */
export const DEMO_TENANT_KEYS: Readonly<Record<string, string>> = { 'tenant-a': 'local-key-a', 'tenant-b': 'local-key-b', 'tenant-c': 'local-key-c' };

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------
// Child processes: every one is tracked, stopped at the end of its phase, and killed on any exit.

export class Children {
  private readonly live = new Set<ChildProcess>();
  private readonly tails = new Map<ChildProcess, string[]>();

  start(script: string, args: string[], env: NodeJS.ProcessEnv, ipc = false, nodeArgs: readonly string[] = []): ChildProcess {
    const child = spawn(process.execPath, [...nodeArgs, join(packageRoot(), 'dist', script), ...args], {
      env,
      stdio: ipc ? ['ignore', 'pipe', 'inherit', 'ipc'] : ['ignore', 'pipe', 'inherit'],
    });
    const tail: string[] = [];
    this.tails.set(child, tail);
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      tail.push(...chunk.split('\n').filter(Boolean));
      tail.splice(0, Math.max(0, tail.length - 30));
    });
    this.live.add(child);
    child.once('exit', () => this.live.delete(child));
    return child;
  }

  /** The child's last stdout lines (pino JSON), for error messages. */
  tail(child: ChildProcess): string {
    return (this.tails.get(child) ?? []).join('\n');
  }

  /** Rejects as soon as the child exits: race it against anything that waits on the child. */
  exited(child: ChildProcess, what: string): Promise<never> {
    const p = new Promise<never>((_, reject) => {
      const fail = (code: number | null, signal: string | null) => reject(new Error(`${what} exited early (code ${code}, signal ${signal}); its last output:\n${this.tail(child)}`));
      if (child.exitCode !== null || child.signalCode !== null) fail(child.exitCode, child.signalCode);
      else child.once('exit', fail);
    });
    // Handled here so a child stopped on purpose later is not an unhandled rejection.
    p.catch(() => undefined);
    return p;
  }

  /** SIGTERM, then SIGKILL after the grace period. */
  async stop(child: ChildProcess, graceMs = STOP_GRACE_MS): Promise<void> {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exit = once(child, 'exit');
    child.kill('SIGTERM');
    const inTime = await Promise.race([exit.then(() => true), sleep(graceMs).then(() => false)]);
    if (!inTime) {
      child.kill('SIGKILL');
      await Promise.race([exit, sleep(2_000)]);
    }
  }

  stopAll(): Promise<void> {
    return Promise.all([...this.live].map((c) => this.stop(c))).then(() => undefined);
  }

  /** Synchronous last resort (process 'exit', signals): nothing is left running. */
  killAll(): void {
    for (const c of this.live) c.kill('SIGKILL');
  }
}

// ---------------------------------------------------------------------------------------------
// Configuration.


/** The built-in config/local.yaml as a document (its demo ingress secret's file made absolute). */
export function localConfig(): Record<string, any> {
  return builtInConfigDocument();
}

/** local.yaml pointed at the bench's simulator, registry and ops port, logging at warn; caps are the caller's. */
export function benchConfigBase(o: { simulatorUrl: string; registryDir: string; opsPort: number }): Record<string, any> {
  const c = localConfig();
  c.localInfra = false;
  c.logLevel = 'warn';
  c.opsPort = o.opsPort;
  c.schemaRegistry = { dir: o.registryDir };
  c.simulator = { ...c.simulator, url: o.simulatorUrl };
  c.anthropic = { baseUrl: o.simulatorUrl };
  return c;
}

export function writeYaml(dir: string, name: string, doc: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, stringify(doc));
  return path;
}

/** The children must never reach the real Anthropic API, whatever this shell has set. */
export function childEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extra };
  delete env.ANTHROPIC_API_KEY;
  delete env.ANTHROPIC_BASE_URL;
  delete env.SLUICE_CONFIG;
  delete env.SLUICE_ROLES;
  return env;
}

/** The processor's Prometheus text, or undefined if it cannot be read (diagnostics only). */
export async function scrape(url: string): Promise<string | undefined> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
    return res.ok ? await res.text() : undefined;
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// The harness.

/** What a bench holds while it runs: the infrastructure, its child processes, a Redis client, a temp dir. */
export interface BenchHarness {
  infra: { kafkaBrokers: string[]; redisUrl: string; databaseUrl: string };
  children: Children;
  redis: Redis;
  dir: string;
  logger: Logger;
}

/**
 * Brings the infrastructure up and runs `body`; afterwards, however it ended, every child is
 * stopped (killed on a signal or an exit) and the temp dir removed.
 */
export async function withBenchHarness<T>(name: string, body: (h: BenchHarness) => Promise<T>): Promise<T> {
  // Stdout carries the figures (a table or one JSON object): the harness's own logs go to stderr.
  const logger = createLogger('warn', 'sluice', pino.destination(2));
  const infra = await infraUp({ stateDir: process.env.SLUICE_STATE_DIR ?? '.sluice', logger });
  const children = new Children();
  const killAll = () => children.killAll();
  const onSignal = (signal: NodeJS.Signals) => {
    children.killAll();
    process.stderr.write(`sluice-bench: ${signal}, children killed\n`);
    process.exit(130);
  };
  process.on('exit', killAll);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const dir = mkdtempSync(join(tmpdir(), `sluice-bench-${name}-`));
  const redis = new Redis(infra.redisUrl, { maxRetriesPerRequest: 1, commandTimeout: 5_000 });
  try {
    return await body({ infra, children, redis, dir, logger });
  } finally {
    await children.stopAll();
    redis.disconnect();
    rmSync(dir, { recursive: true, force: true });
    process.off('exit', killAll);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
