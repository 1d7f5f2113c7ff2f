import { Cluster } from 'ioredis';
import { inject } from 'vitest';
import type { SluiceConfig } from '../../../src/config/schema.js';
import { createRedisClient, type RedisClient } from '../../../src/redis/client.js';
import { LuaScripts } from '../../../src/redis/scripts.js';

/** The Redis deployments a suite parameterised with `describe.each(REDIS_BACKENDS)` runs against. */
export const REDIS_BACKENDS = ['single-node', 'cluster'] as const;
export type RedisBackend = (typeof REDIS_BACKENDS)[number];

/** The `redis` config section of a backend: the integration Redis, or the run's throwaway cluster. */
export function redisConfigOf(backend: RedisBackend): SluiceConfig['redis'] {
  return backend === 'cluster' ? { url: 'redis://127.0.0.1', cluster: inject('redisCluster') } : { url: inject('infra').redisUrl };
}

/** What a spawned `sluice` needs in its environment to use the backend (REDIS_URL is set by startSluice). */
export function redisEnvOf(backend: RedisBackend): Record<string, string> {
  return backend === 'cluster' ? { REDIS_CLUSTER: inject('redisCluster').join(',') } : {};
}

/** A client to the backend with bounded waits, so a broken server fails a test instead of hanging it. */
export const connectRedis = (backend: RedisBackend = 'single-node'): RedisClient =>
  createRedisClient(redisConfigOf(backend), { maxRetriesPerRequest: 1, connectTimeout: 5_000, commandTimeout: 5_000 });

/** Two separate connections, as two API instances would have. */
export async function connectPair(backend: RedisBackend = 'single-node'): Promise<[RedisClient, RedisClient]> {
  const pair: [RedisClient, RedisClient] = [connectRedis(backend), connectRedis(backend)];
  await Promise.all(pair.map((r) => r.ping()));
  return pair;
}

/** Removes every key a test file created (its namespace), leaving other files' keys alone; on a cluster, from every master. */
export async function deleteMatching(r: RedisClient, pattern: string): Promise<void> {
  for (const node of r instanceof Cluster ? r.nodes('master') : [r]) {
    const found = new Set<string>();
    let cursor = '0';
    do {
      const [next, batch] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      cursor = next;
      for (const k of batch) found.add(k);
    } while (cursor !== '0');
    // One key per command: the keys of a file span many slots.
    await Promise.all([...found].map((k) => node.unlink(k)));
  }
}

/** The Redis server's clock in ms, the one the scripts read with TIME. */
export async function redisNowMs(r: RedisClient): Promise<number> {
  const [s, us] = await r.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

/** Two connections with the scripts registered on each: the usual fixture of a Lua test file. */
export async function openScriptPair(backend: RedisBackend = 'single-node'): Promise<{ a: RedisClient; b: RedisClient; scriptsA: LuaScripts; scriptsB: LuaScripts }> {
  const [a, b] = await connectPair(backend);
  return { a, b, scriptsA: new LuaScripts(a), scriptsB: new LuaScripts(b) };
}

/** Deletes the file's keys and closes both connections (a no-op if opening failed). */
export async function closeScriptPair(a: RedisClient | undefined, b: RedisClient | undefined, pattern: string): Promise<void> {
  if (!a || !b) return;
  await deleteMatching(a, pattern);
  await Promise.all([a.quit(), b.quit()]);
}

/** How many connections listen on a sharded channel, summed over a cluster's masters (only the owner of its slot has any). */
export async function shardChannelSubscribers(r: RedisClient, channel: string): Promise<number> {
  const counts = await Promise.all((r instanceof Cluster ? r.nodes('master') : [r]).map(async (node) => Number(((await node.pubsub('SHARDNUMSUB', channel)) as [string, number])[1])));
  return counts.reduce((sum, n) => sum + n, 0);
}
