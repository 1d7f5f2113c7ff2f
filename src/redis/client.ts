import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type { SluiceConfig } from '../config/schema.js';

/** A connection to Redis: one server (`redis.url`) or a Redis Cluster (`redis.cluster`). */
export type RedisClient = Redis | Cluster;

/** The per-connection options both forms take (timeouts, retries, lazy connecting). */
export type RedisClientOptions = Pick<RedisOptions, 'lazyConnect' | 'connectTimeout' | 'commandTimeout' | 'maxRetriesPerRequest' | 'enableOfflineQueue'>;

/** Sharded pub/sub (SSUBSCRIBE/SPUBLISH), which the wake-up and breaker channels use, came with Redis 7. */
export const MIN_REDIS_MAJOR = 7;

/**
 * Credentials and TLS of `redis.url`, for the nodes of a cluster (whose addresses come from
 * `redis.cluster` and from the cluster itself).
 */
function nodeOptionsFromUrl(url: string): Pick<RedisOptions, 'username' | 'password' | 'tls'> {
  const u = new URL(url);
  return {
    ...(u.username ? { username: decodeURIComponent(u.username) } : {}),
    ...(u.password ? { password: decodeURIComponent(u.password) } : {}),
    ...(u.protocol === 'rediss:' ? { tls: {} } : {}),
  };
}

function seedNode(hostPort: string): { host: string; port: number } {
  const i = hostPort.lastIndexOf(':');
  return { host: hostPort.slice(0, i), port: Number(hostPort.slice(i + 1)) };
}

/** Connects to the configured Redis: the cluster when `redis.cluster` names nodes, else the server at `redis.url`. */
export function createRedisClient(config: SluiceConfig['redis'], opts: RedisClientOptions): RedisClient {
  if (!config.cluster) return new Redis(config.url, opts);
  const { lazyConnect, enableOfflineQueue, ...perNode } = opts;
  return new Cluster(config.cluster.map(seedNode), {
    ...(lazyConnect !== undefined ? { lazyConnect } : {}),
    ...(enableOfflineQueue !== undefined ? { enableOfflineQueue } : {}),
    redisOptions: { ...perNode, ...nodeOptionsFromUrl(config.url) },
  });
}

/**
 * A connection of its own for SSUBSCRIBE (a subscribed connection runs no other command). On a
 * cluster it keeps one subscriber per master, so each channel is heard on the shard that owns it.
 */
export function duplicateForSubscribing(client: RedisClient): RedisClient {
  return client instanceof Cluster ? client.duplicate([], { shardedSubscribers: true }) : client.duplicate();
}

/** The major version in an INFO server reply, undefined when it names none. */
export function redisMajorVersion(info: string): number | undefined {
  const version = /^redis_version:(\d+)\./m.exec(info)?.[1];
  return version === undefined ? undefined : Number(version);
}

/** Rejects with a message saying what to do when the server is older than Redis 7 (no sharded pub/sub). */
export async function requireShardedPubSub(client: RedisClient): Promise<void> {
  const info = await client.info('server');
  const major = redisMajorVersion(info);
  if (major === undefined || major < MIN_REDIS_MAJOR) {
    const found = /^redis_version:(\S+)/m.exec(info)?.[1] ?? 'an unknown version';
    throw new Error(`Sluice needs Redis ${MIN_REDIS_MAJOR} or newer (sharded pub/sub, SSUBSCRIBE/SPUBLISH); the server runs ${found}`);
  }
}
