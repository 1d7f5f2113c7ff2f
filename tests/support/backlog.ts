import { Redis } from 'ioredis';
import { RUN_CLASSES } from '../../src/config/schema.js';
import { redisKeys } from '../../src/redis/keys.js';

/**
 * Entries in every admission backlog zset of a namespace (per tenant, per class, overall). Each
 * admitted run holds one entry in each until its terminal status releases it, so once every
 * admitted run has finished all must read zero: anything left is capacity leaked until the
 * entry's lease (deadline + grace) runs out.
 */
export async function backlogEntries(redisUrl: string, namespace: string, tenants: string[]): Promise<Record<string, number>> {
  const keys = redisKeys(namespace);
  const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await redis.connect();
    const zsets = [...tenants.map((t) => [`tenant:${t}`, keys.backlogTenant(t)]), ...RUN_CLASSES.map((c) => [`class:${c}`, keys.backlogClass(c)]), ['all', keys.backlogAll()]] as const;
    const counts = await Promise.all(zsets.map(([, key]) => redis.zcard(key)));
    return Object.fromEntries(zsets.map(([name], i) => [name, counts[i]!]));
  } finally {
    redis.disconnect();
  }
}

/** Waits (bounded) for every backlog zset of the namespace to empty; returns the last counts. */
export async function backlogAfterSettling(redisUrl: string, namespace: string, tenants: string[], withinMs = 10_000): Promise<Record<string, number>> {
  const until = Date.now() + withinMs;
  for (;;) {
    const counts = await backlogEntries(redisUrl, namespace, tenants);
    if (Object.values(counts).every((n) => n === 0) || Date.now() >= until) return counts;
    await new Promise((r) => setTimeout(r, 250));
  }
}
