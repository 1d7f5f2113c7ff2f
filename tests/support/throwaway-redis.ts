import type { ChildProcess } from 'node:child_process';
import { ensureExecutable } from '../../src/dev/infra/apt.js';
import { spawnEphemeralRedis } from '../../src/dev/infra/redis.js';
import { createLogger } from '../../src/obs/logger.js';
import { terminate } from '../../src/dev/infra/process.js';
import { freePort } from '../../src/util/free-port.js';

/** The machine's own Redis: a drill never stops it. */
const SHARED_REDIS_PORT = 6379;

export interface ThrowawayRedis {
  url: string;
  /** The running server's pid, undefined while it is stopped. */
  pid: () => number | undefined;
  /** Stops the server (SIGTERM, SIGKILL after 5 s); its data is gone, as it is never saved. */
  stop: () => Promise<void>;
  /** Starts a new, empty server on the same port. */
  start: () => Promise<void>;
  /** Stops it for good (afterAll). */
  close: () => Promise<void>;
}

/**
 * A `redis-server` of the test's own on a free loopback port, with persistence off, so a drill
 * can stop it and bring it back empty without touching the shared Redis. Stopped by pid only;
 * a process exit hook kills it should the test process die before `stop`.
 */
export async function startThrowawayRedis(): Promise<ThrowawayRedis> {
  const { path: redisServer } = await ensureExecutable('redis-server', 'redis-server', 'run the drill where redis-server is installed', createLogger('warn', 'throwaway-redis'));
  const port = await freePort();
  if (port === SHARED_REDIS_PORT) throw new Error('refusing to run a throwaway Redis on the shared port 6379');
  const url = `redis://127.0.0.1:${port}`;
  let child: ChildProcess | undefined;
  const killOnExit = () => child?.kill('SIGKILL');
  process.once('exit', killOnExit);

  const start = async () => {
    if (child) throw new Error('the throwaway Redis is already running');
    const server = await spawnEphemeralRedis(redisServer, port);
    child = server;
    server.once('exit', () => {
      if (child === server) child = undefined;
    });
  };

  const stop = async () => {
    const pid = child?.pid;
    child = undefined;
    if (pid !== undefined) await terminate(pid, 5_000);
  };

  const close = async () => {
    await stop();
    process.off('exit', killOnExit);
  };

  await start();
  return { url, pid: () => child?.pid, stop, start, close };
}
