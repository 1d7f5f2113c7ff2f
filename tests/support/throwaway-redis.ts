import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureRedis, stopRedis } from '../../src/infra/redis.js';
import { createLogger } from '../../src/obs/logger.js';
import { freePort } from '../../src/util/free-port.js';

export interface ThrowawayRedis {
  url: string;
  pid: number;
  /** Stops this server by its pid (a no-op once stopped). */
  stop: () => Promise<void>;
}

/**
 * A redis-server of the test's own on a free port, without persistence, for drills that stop
 * Redis: the machine's Redis (6379) is shared and must never be stopped.
 */
export async function throwawayRedis(): Promise<ThrowawayRedis> {
  const stateDir = mkdtempSync(join(tmpdir(), 'sluice-redis-'));
  const url = `redis://127.0.0.1:${await freePort()}`;
  const logger = createLogger('silent');
  const up = await ensureRedis({ stateDir, url, mayStart: true, logger });
  if (!up.started || up.pid === undefined) throw new Error(`something already answers at ${url}; it is not ours to stop`);
  const pid = up.pid;
  return { url, pid, stop: async () => void (await stopRedis(stateDir, pid, logger)) };
}
