import { Redis } from 'ioredis';
import { LuaScripts } from '../../../src/redis/scripts.js';
import { inject } from 'vitest';

/** A client to the integration Redis with bounded waits, so a broken server fails a test instead of hanging it. */
export const connectRedis = () => new Redis(inject('infra').redisUrl, { maxRetriesPerRequest: 1, connectTimeout: 5_000, commandTimeout: 5_000 });

/** Two separate connections, as two API instances would have. */
export async function connectPair(): Promise<[Redis, Redis]> {
  const pair: [Redis, Redis] = [connectRedis(), connectRedis()];
  await Promise.all(pair.map((r) => r.ping()));
  return pair;
}

/** Removes every key a test file created (its namespace), leaving other files' keys alone. */
export async function deleteMatching(r: Redis, pattern: string): Promise<void> {
  const found = new Set<string>();
  let cursor = '0';
  do {
    const [next, batch] = await r.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    for (const k of batch) found.add(k);
  } while (cursor !== '0');
  if (found.size > 0) await r.del(...found);
}

/** The Redis server's clock in ms, the one the scripts read with TIME. */
export async function redisNowMs(r: Redis): Promise<number> {
  const [s, us] = await r.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

/** Two connections with the scripts registered on each: the usual fixture of a Lua test file. */
export async function openScriptPair(): Promise<{ a: Redis; b: Redis; scriptsA: LuaScripts; scriptsB: LuaScripts }> {
  const [a, b] = await connectPair();
  return { a, b, scriptsA: new LuaScripts(a), scriptsB: new LuaScripts(b) };
}

/** Deletes the file's keys and closes both connections (a no-op if opening failed). */
export async function closeScriptPair(a: Redis | undefined, b: Redis | undefined, pattern: string): Promise<void> {
  if (!a || !b) return;
  await deleteMatching(a, pattern);
  await Promise.all([a.quit(), b.quit()]);
}
