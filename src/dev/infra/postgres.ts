import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import pg from 'pg';
import type { Logger } from '../../obs/logger.js';
import { ensureExecutable } from './apt.js';
import { inspectPidFile, runChecked, waitFor } from './process.js';
import { redactUrl } from '../../util/url.js';

export const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/sluice';
const CONNECT_TIMEOUT_MS = 3_000;
const START_TIMEOUT_MS = 60_000;
// Debian's layout (postgresql-common): one directory per cluster, an extra pid file per cluster.
const CLUSTER_CONF_DIR = '/etc/postgresql';
const CLUSTER_NAME = 'main';

/** The database a URL names: its path, else (as libpq does) the user name. */
export function databaseName(url: string): string {
  const u = new URL(url);
  return decodeURIComponent(u.pathname.replace(/^\//, '')) || decodeURIComponent(u.username) || 'postgres';
}

/** The same server and credentials, but the `postgres` maintenance database (which always exists). */
export function maintenanceUrl(url: string): string {
  const u = new URL(url);
  u.pathname = '/postgres';
  return u.toString();
}

export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

export type PostgresProbe =
  | { state: 'ready' }
  | { state: 'no-database' }
  | { state: 'auth-failed'; reason: string }
  | { state: 'unreachable'; reason: string };

async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: CONNECT_TIMEOUT_MS, query_timeout: 10_000 });
  client.on('error', () => undefined); // a dropped connection surfaces through the awaited query
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

const pgCode = (err: unknown): string | undefined => (err as { code?: string }).code;

/** Connects to the URL's own database; tells a server that is down from one that turns us away. */
export async function probePostgres(url: string): Promise<PostgresProbe> {
  try {
    await withClient(url, (c) => c.query('SELECT 1'));
    return { state: 'ready' };
  } catch (err) {
    const code = pgCode(err);
    const reason = (err as Error).message;
    if (code === '3D000') return { state: 'no-database' };
    if (code === '28P01' || code === '28000') return { state: 'auth-failed', reason };
    return { state: 'unreachable', reason };
  }
}

/** Creates the URL's database if it does not exist; returns whether it did. */
export async function ensureDatabase(url: string, logger: Logger): Promise<boolean> {
  if ((await probePostgres(url)).state !== 'no-database') return false;
  const name = databaseName(url);
  try {
    await withClient(maintenanceUrl(url), (c) => c.query(`CREATE DATABASE ${quoteIdent(name)}`));
  } catch (err) {
    // Another process created it between our check and our CREATE.
    if (pgCode(err) === '42P04' || pgCode(err) === '23505') return false;
    throw err;
  }
  logger.info({ database: name }, 'database created');
  return true;
}

/** The newest Debian cluster named `main`, e.g. "15", if any is configured. */
export async function localClusterVersion(): Promise<string | undefined> {
  const entries = await readdir(CLUSTER_CONF_DIR).catch(() => [] as string[]);
  return entries
    .filter((v) => /^\d+(\.\d+)?$/.test(v) && existsSync(`${CLUSTER_CONF_DIR}/${v}/${CLUSTER_NAME}/postgresql.conf`))
    .sort((a, b) => Number(b) - Number(a))[0];
}

/** The postmaster's pid of a local cluster, from the pid file Debian's default config writes. */
export async function postmasterPid(version: string): Promise<number | undefined> {
  const s = await inspectPidFile(`/var/run/postgresql/${version}-${CLUSTER_NAME}.pid`, [
    `${CLUSTER_CONF_DIR}/${version}/${CLUSTER_NAME}/`,
  ]);
  return s.state === 'running' ? s.pid : undefined;
}

function authError(url: string, reason: string): Error {
  return new Error(
    `PostgreSQL at ${redactUrl(url)} refused the login (${reason}). Put credentials in DATABASE_URL, ` +
      'or for local development allow `host all all 127.0.0.1/32 trust` in pg_hba.conf',
  );
}

async function pgCtlCluster(version: string, action: 'start' | 'stop', logger: Logger) {
  // Without systemd as PID 1 the default redirect to systemctl fails; we supervise by pid instead.
  // Exit code 2 means "already running" for start and "not running" for stop: both are fine.
  await runChecked('pg_ctlcluster', ['--skip-systemctl-redirect', version, CLUSTER_NAME, action], {
    timeoutMs: START_TIMEOUT_MS,
    okCodes: [2],
  });
  logger.info({ version, cluster: CLUSTER_NAME, action }, `PostgreSQL cluster ${action}`);
}

export interface PostgresUp {
  started: boolean;
  /** Cluster version when the server is the local Debian cluster. */
  version?: string;
  pid?: number;
}

/**
 * Makes PostgreSQL answer at `url` and creates its database. Only the default local address may
 * be started here (the Debian cluster, installing the package if needed); a DATABASE_URL
 * (`mayStart` false) is checked, never started.
 */
export async function ensurePostgres(opts: {
  url: string;
  mayStart: boolean;
  logger: Logger;
}): Promise<PostgresUp> {
  const { url, logger } = opts;
  const probe = await probePostgres(url);
  if (probe.state === 'auth-failed') throw authError(url, probe.reason);
  let started = false;
  if (probe.state === 'unreachable') {
    if (!opts.mayStart) throw new Error(`PostgreSQL at ${redactUrl(url)} (DATABASE_URL) is not reachable: ${probe.reason}`);
    started = await startLocalCluster(url, logger);
  }
  await ensureDatabase(url, logger);
  if (!opts.mayStart) return { started };
  const version = await localClusterVersion();
  return { started, version, pid: version === undefined ? undefined : await postmasterPid(version) };
}

/** Starts the local cluster and waits until it accepts `url`; false if installing it started it. */
async function startLocalCluster(url: string, logger: Logger): Promise<boolean> {
  const ctl = await ensureExecutable('pg_ctlcluster', 'postgresql', 'set DATABASE_URL', logger);
  const version = await localClusterVersion();
  if (version === undefined) {
    throw new Error(
      `no PostgreSQL cluster in ${CLUSTER_CONF_DIR}: create one (pg_createcluster <version> main --start) or set DATABASE_URL`,
    );
  }
  const installedAndRunning = ctl.installed && (await probePostgres(url)).state !== 'unreachable';
  if (!installedAndRunning) await pgCtlCluster(version, 'start', logger);
  const probe = await waitFor(START_TIMEOUT_MS, 250, async () => {
    const p = await probePostgres(url);
    return p.state === 'unreachable' ? undefined : p;
  });
  if (probe === undefined) throw new Error(`PostgreSQL ${version}/${CLUSTER_NAME} started but does not accept connections at ${redactUrl(url)}`);
  if (probe.state === 'auth-failed') throw authError(url, probe.reason);
  return !installedAndRunning;
}

/** Stops the local cluster if it is still the postmaster this state dir started. */
export async function stopPostgres(
  owned: { version: string; pid: number },
  logger: Logger,
): Promise<boolean> {
  if ((await postmasterPid(owned.version)) !== owned.pid) return false;
  await pgCtlCluster(owned.version, 'stop', logger);
  return true;
}
