import { Cluster, Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createRedisClient, duplicateForSubscribing, redisMajorVersion, requireShardedPubSub } from '../../../src/redis/client.js';

const OPTS = { lazyConnect: true, connectTimeout: 2_000, commandTimeout: 2_000, maxRetriesPerRequest: 1 };

describe('createRedisClient', () => {
  it('connects to the one server of redis.url when no cluster is named', () => {
    const client = createRedisClient({ url: 'redis://127.0.0.1:6390' }, OPTS);
    expect(client).toBeInstanceOf(Redis);
    expect((client as Redis).options).toMatchObject({ host: '127.0.0.1', port: 6390, ...OPTS });
    client.disconnect();
  });

  it('connects to the cluster of redis.cluster, with the same per-node timeouts and the credentials and TLS of redis.url', () => {
    const client = createRedisClient({ url: 'rediss://sluice:s%40cret@ignored:1', cluster: ['10.0.0.1:7000', 'node-b:7001'] }, OPTS);
    expect(client).toBeInstanceOf(Cluster);
    const cluster = client as Cluster;
    expect(cluster.options.lazyConnect).toBe(true);
    expect(cluster.options.redisOptions).toMatchObject({ connectTimeout: 2_000, commandTimeout: 2_000, maxRetriesPerRequest: 1, username: 'sluice', password: 's@cret', tls: {} });
    expect((cluster as unknown as { startupNodes: unknown[] }).startupNodes).toEqual([{ host: '10.0.0.1', port: 7000 }, { host: 'node-b', port: 7001 }]);
    cluster.disconnect();
  });

  it('gives a cluster subscriber one sharded subscriber per master, and a server subscriber a plain duplicate', () => {
    const cluster = createRedisClient({ url: 'redis://127.0.0.1', cluster: ['127.0.0.1:7000'] }, OPTS) as Cluster;
    const sub = duplicateForSubscribing(cluster) as Cluster;
    expect(sub).toBeInstanceOf(Cluster);
    expect(sub.options.shardedSubscribers).toBe(true);
    expect(cluster.options.shardedSubscribers).toBeFalsy();
    const server = createRedisClient({ url: 'redis://127.0.0.1:6390' }, OPTS);
    const serverSub = duplicateForSubscribing(server);
    expect(serverSub).toBeInstanceOf(Redis);
    for (const c of [cluster, sub, server, serverSub]) c.disconnect();
  });
});

describe('the Redis 7 check', () => {
  it('reads the major version from INFO server', () => {
    expect(redisMajorVersion('# Server\r\nredis_version:7.0.15\r\nredis_mode:cluster\r\n')).toBe(7);
    expect(redisMajorVersion('redis_version:6.2.14\r\n')).toBe(6);
    expect(redisMajorVersion('# Server\r\n')).toBeUndefined();
  });

  it('refuses an older or unknown server, naming what it found', async () => {
    const serverAt = (info: string) => ({ info: async () => info }) as unknown as Redis;
    await expect(requireShardedPubSub(serverAt('redis_version:7.2.4\r\n'))).resolves.toBeUndefined();
    await expect(requireShardedPubSub(serverAt('redis_version:6.2.14\r\n'))).rejects.toThrow('Sluice needs Redis 7 or newer (sharded pub/sub, SSUBSCRIBE/SPUBLISH); the server runs 6.2.14');
    await expect(requireShardedPubSub(serverAt(''))).rejects.toThrow('the server runs an unknown version');
  });
});
