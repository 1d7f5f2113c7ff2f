import { spawn, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import { Redis } from 'ioredis';
import type { Logger } from '../../obs/logger.js';
import { ensureExecutable } from './apt.js';
import { inspectPidFile, readPidFile, runChecked, tailFile, terminate, waitFor } from './process.js';
import { redactUrl, urlPort } from '../../util/url.js';

export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';
const START_TIMEOUT_MS = 10_000;

const redisFiles = (stateDir: string) => ({
  pidFile: resolve(stateDir, 'redis.pid'),
  logFile: resolve(stateDir, 'redis.log'),
});

/**
 * The server's pid (from INFO) if Redis at `url` answers PING within `timeoutMs`, `null` if it
 * answers but hides its pid, undefined if it does not answer. The client never retries: we want
 * a quick yes or no, not ioredis' reconnect loop.
 */
export async function redisServerPid(url: string, timeoutMs = 1_500): Promise<number | null | undefined> {
  const client = new Redis(url, {
    lazyConnect: true,
    connectTimeout: timeoutMs,
    commandTimeout: timeoutMs,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null,
  });
  client.on('error', () => undefined); // failures surface through the awaited calls
  try {
    await client.connect();
    await client.ping();
    const info = await client.info('server').catch(() => '');
    const pid = /^process_id:(\d+)/m.exec(info)?.[1];
    return pid === undefined ? null : Number(pid);
  } catch {
    return undefined;
  } finally {
    client.disconnect();
  }
}

/**
 * A `redis-server` (at `serverPath`) on loopback `port` with persistence off, for a bench or a
 * drill: resolves once it answers as the process started, kills it and throws if it does not.
 */
export async function spawnEphemeralRedis(serverPath: string, port: number): Promise<ChildProcess> {
  const server = spawn(serverPath, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  const url = `redis://127.0.0.1:${port}`;
  const answering = await waitFor(START_TIMEOUT_MS, 50, async () => ((await redisServerPid(url, 500)) === server.pid ? true : undefined));
  if (!answering) {
    server.kill('SIGKILL');
    throw new Error(`the redis-server started on port ${port} did not answer within ${START_TIMEOUT_MS} ms`);
  }
  return server;
}

export interface RedisUp {
  started: boolean;
  /** The server's pid when known (always known when we started it). */
  pid?: number;
}

/**
 * Makes Redis answer at `url`. With `mayStart` (the default local address) a missing server is
 * started on 127.0.0.1 at the URL's port; a URL from REDIS_URL is checked, never started.
 */
export async function ensureRedis(opts: {
  stateDir: string;
  url: string;
  mayStart: boolean;
  logger: Logger;
}): Promise<RedisUp> {
  const { url, logger } = opts;
  const running = await redisServerPid(url);
  if (running !== undefined) return { started: false, pid: running ?? undefined };
  if (!opts.mayStart) throw new Error(`Redis at ${redactUrl(url)} (REDIS_URL) does not answer PING`);

  const server = await ensureExecutable('redis-server', 'redis-server', 'set REDIS_URL', logger);
  // The package's install script may have started the service already.
  const afterInstall = server.installed ? await redisServerPid(url) : undefined;
  if (afterInstall !== undefined) return { started: false, pid: afterInstall ?? undefined };

  const { pidFile, logFile } = redisFiles(opts.stateDir);
  const port = urlPort(url, 6379);
  const t0 = Date.now();
  await runChecked(
    server.path,
    ['--daemonize', 'yes', '--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no',
      '--pidfile', pidFile, '--logfile', logFile],
    { timeoutMs: START_TIMEOUT_MS },
  );
  const pid = await waitFor(START_TIMEOUT_MS, 100, async () =>
    (await redisServerPid(url)) !== undefined ? readPidFile(pidFile) : undefined,
  );
  if (pid === undefined) {
    throw new Error(`redis-server did not answer within ${START_TIMEOUT_MS} ms\n--- ${logFile}\n${await tailFile(logFile, 30)}`);
  }
  logger.info({ pid, port, durationMs: Date.now() - t0 }, 'Redis started');
  return { started: true, pid };
}

/** Stops the Redis that this state dir started, if it is still the process we recorded. */
export async function stopRedis(stateDir: string, recordedPid: number, logger: Logger): Promise<boolean> {
  const own = await inspectPidFile(redisFiles(stateDir).pidFile, ['redis-server']);
  if (own.state !== 'running' || own.pid !== recordedPid) return false;
  const how = await terminate(own.pid, 10_000);
  logger.info({ pid: own.pid, how }, 'Redis stopped');
  return true;
}
