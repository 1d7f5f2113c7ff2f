import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inject } from 'vitest';
import { stringify } from 'yaml';
import { builtInConfigDocument } from '../../src/config/load.js';
import type { RunRequested } from '../../src/events/schemas.js';
import { newRunId } from '../../src/runs/run-id.js';
import { packageRoot } from '../../src/util/package-root.js';
import { freePort } from '../../src/util/free-port.js';

export { freePort };

export const TENANT_A_KEY = 'local-key-a';
export const TENANT_B_KEY = 'local-key-b';
export const TENANT_C_KEY = 'local-key-c';
export const ADMIN_KEY = 'local-admin-key';

/** A fresh namespace (topics, groups, Redis keys) per test file, so files never see each other's state. */
export function testNamespace(label: string): string {
  return `t-${label}-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}.`;
}

/** A batch run of support-reply for tenant-a as admission would produce it, admitted now with a minute to go. */
export function batchRunNow(): RunRequested {
  const now = Date.now();
  return { runId: newRunId(), tenantId: 'tenant-a', workflow: 'support-reply', class: 'batch', admittedAt: now, deadline: now + 60_000, attempt: 1, traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', input: '{}', idempotencyKey: null, dueAt: null };
}

type Json = Record<string, unknown>;

/** `patch` over `base`, objects merged key by key, anything else replaced. */
export function deepMerge(base: Json, patch: Json): Json {
  const out: Json = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    const b = out[k];
    out[k] = v && typeof v === 'object' && !Array.isArray(v) && b && typeof b === 'object' && !Array.isArray(b) ? deepMerge(b as Json, v as Json) : v;
  }
  return out;
}

/**
 * The built-in local config with test overrides, written to a temp file. Without the demo tenant's
 * ingress secret: a test gives the tenants it submits for through Kafka secrets of its own (a
 * secretEnv merged over the demo's secretFile would name both).
 */
export function writeTestConfig(overrides: Json = {}): string {
  const base = builtInConfigDocument();
  for (const tenant of Object.values(base.tenants as Record<string, Json>)) delete tenant.ingress;
  const dir = mkdtempSync(join(tmpdir(), 'sluice-test-'));
  const path = join(dir, 'config.yaml');
  writeFileSync(path, stringify(deepMerge(deepMerge(base, { localInfra: false }), overrides)));
  return path;
}

export interface SluiceProcess {
  child: ChildProcess;
  /** Every JSON log line so far. */
  logs: Json[];
  stdout: () => string;
  stderr: () => string;
  waitForLog: (predicate: (line: Json) => boolean, timeoutMs?: number) => Promise<Json>;
  /** SIGTERM and wait for exit; returns the exit code. */
  stop: (timeoutMs?: number) => Promise<number | null>;
  kill9: () => Promise<void>;
}

/**
 * Runs `sluice start` as a user would: the compiled CLI in its own process, against real
 * infrastructure. Started once it logs 'sluice started', or (`ready: 'banner'`, for a log level
 * above info, which never writes that line) once it printed its start banner.
 */
export async function startSluice(opts: { configPath: string; roles: string; namespace: string; env?: Record<string, string>; ready?: 'log' | 'banner' }): Promise<SluiceProcess> {
  const cli = join(packageRoot(), 'dist', 'cli', 'main.js');
  if (!existsSync(cli)) throw new Error(`${cli} is missing: run \`npm run build\` (npm test does it first)`);
  const infra = inject('infra');
  const child = spawn(process.execPath, [cli, 'start', '--config', opts.configPath], {
    cwd: packageRoot(),
    env: {
      ...process.env,
      KAFKA_BROKERS: infra.kafkaBrokers.join(','),
      REDIS_URL: infra.redisUrl,
      DATABASE_URL: infra.databaseUrl,
      SLUICE_NAMESPACE: opts.namespace,
      SLUICE_ROLES: opts.roles,
      SLUICE_LOG_LEVEL: 'info',
      ...opts.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: Json[] = [];
  let raw = '';
  let pending = '';
  const waiters: { predicate: (l: Json) => boolean; resolve: (l: Json) => void }[] = [];
  child.stdout!.on('data', (chunk: Buffer) => {
    raw += chunk.toString();
    pending += chunk.toString();
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.startsWith('{')) continue;
      let parsed: Json;
      try {
        parsed = JSON.parse(line) as Json;
      } catch {
        continue;
      }
      logs.push(parsed);
      for (const w of [...waiters]) {
        if (w.predicate(parsed)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(parsed);
        }
      }
    }
  });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));

  const waitForLog = (predicate: (line: Json) => boolean, timeoutMs = 60_000) => {
    const found = logs.find(predicate);
    if (found) return Promise.resolve(found);
    return new Promise<Json>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`log line not seen within ${timeoutMs} ms; stderr: ${stderr.slice(-2000)}`)), timeoutMs);
      waiters.push({ predicate, resolve: (l) => (clearTimeout(timer), resolve(l)) });
      void exited.then((code) => {
        clearTimeout(timer);
        reject(new Error(`sluice exited (${code}) before the log line; stderr: ${stderr.slice(-2000)}`));
      });
    });
  };

  const proc: SluiceProcess = {
    child,
    logs,
    stdout: () => raw,
    stderr: () => stderr,
    waitForLog,
    stop: async (timeoutMs = 30_000) => {
      if (child.exitCode !== null) return child.exitCode;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
    kill9: async () => {
      child.kill('SIGKILL');
      await exited;
    },
  };
  if (opts.ready === 'banner') await eventually(async () => (raw.includes('Sluice is running') ? true : undefined), 90_000, `the start banner (stderr: ${stderr.slice(-2000)})`);
  else await waitForLog((l) => l.msg === 'sluice started', 90_000);
  return proc;
}

export interface HttpResult {
  status: number;
  headers: Headers;
  body: any;
}

export async function http(url: string, init: RequestInit & { key?: string; json?: unknown } = {}): Promise<HttpResult> {
  const headers = new Headers(init.headers);
  if (init.key) headers.set('authorization', `Bearer ${init.key}`);
  let body = init.body;
  if (init.json !== undefined) {
    headers.set('content-type', 'application/json');
    body = JSON.stringify(init.json);
  }
  const res = await fetch(url, { ...init, headers, body, signal: AbortSignal.timeout(15_000) });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    /* not JSON: keep the text */
  }
  return { status: res.status, headers: res.headers, body: parsed };
}

/** A scrape of `/metrics` on an API port, which answers it to the admin key (the ops port needs none). */
export function scrapeMetrics(apiUrl: string): Promise<Response> {
  return fetch(`${apiUrl}/metrics`, { headers: { authorization: `Bearer ${ADMIN_KEY}` }, signal: AbortSignal.timeout(15_000) });
}

/** Polls until `check` returns a value or the time is up; bounded so a broken run fails the test, not CI. */
export async function eventually<T>(check: () => Promise<T | undefined>, timeoutMs: number, what: string, intervalMs = 100): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < until) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ''}`);
}

export async function waitForStatus(apiUrl: string, runId: string, key: string, statuses: string[], timeoutMs = 30_000): Promise<any> {
  return eventually(
    async () => {
      const r = await http(`${apiUrl}/v1/runs/${runId}`, { key });
      return r.status === 200 && statuses.includes(r.body.status) ? r.body : undefined;
    },
    timeoutMs,
    `run ${runId} to reach ${statuses.join('|')}`,
  );
}

/**
 * The compiled CLI, run as an operator would, against the test's infrastructure and namespace;
 * `env` overrides (e.g. a throwaway Redis). Killed after a minute so a hung command fails the test.
 */
export function runCli(args: string[], namespace: string, env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const infra = inject('infra');
  const child = spawn(process.execPath, [join(packageRoot(), 'dist', 'cli', 'main.js'), ...args], {
    cwd: packageRoot(),
    env: { ...process.env, KAFKA_BROKERS: infra.kafkaBrokers.join(','), REDIS_URL: infra.redisUrl, DATABASE_URL: infra.databaseUrl, SLUICE_NAMESPACE: namespace, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  return new Promise((resolve) => child.once('exit', (code) => (clearTimeout(timer), resolve({ code, stdout, stderr }))));
}
