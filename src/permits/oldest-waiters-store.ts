import type { RedisClient } from '../redis/client.js';
import type { RedisKeys } from '../redis/keys.js';
import type { LuaScripts } from '../redis/scripts.js';
import { isRecord } from '../util/is-record.js';

/** How often each processor publishes its oldest waiters: the most the console's figure lags behind. */
export const OLDEST_WAITERS_EVERY_MS = 2_000;

/** A processor's entry lapses this long after its last publication: a dead processor's waiters vanish with it. */
export const OLDEST_WAITERS_TTL_MS = 3 * OLDEST_WAITERS_EVERY_MS;

/**
 * Per scope, seconds its longest waiter has waited at `now`, across the live entries of the
 * oldest-waiters hash (see oldest-waiters-publish.lua); lapsed and unreadable entries count for nothing.
 */
export function oldestAges(entries: Readonly<Record<string, string>>, now: number): Map<string, number> {
  const since = new Map<string, number>();
  for (const text of Object.values(entries)) {
    let entry: unknown;
    try {
      entry = JSON.parse(text);
    } catch {
      continue;
    }
    if (!isRecord(entry) || typeof entry.until !== 'number' || entry.until <= now || !isRecord(entry.since)) continue;
    for (const [scope, at] of Object.entries(entry.since)) {
      if (typeof at !== 'number') continue;
      const earliest = since.get(scope);
      if (earliest === undefined || at < earliest) since.set(scope, at);
    }
  }
  // A failover to a replica whose clock is behind could put a start after now.
  return new Map([...since].map(([scope, at]) => [scope, Math.max(0, now - at) / 1000]));
}

/**
 * Where every processor publishes, and the console reads, how long the oldest run or call has
 * waited per permit scope: one hash, a field per processor, each publication one EVALSHA.
 */
export class OldestWaitersStore {
  constructor(
    private readonly scripts: Pick<LuaScripts, 'run'>,
    private readonly redis: Pick<RedisClient, 'pipeline'>,
    private readonly keys: Pick<RedisKeys, 'oldestWaiters'>,
  ) {}

  /**
   * Replaces an instance's entry with when its oldest waiter per scope began to wait (ms on this
   * process's clock, sent as ages at `now`); an empty map removes the entry. Resolves to how many
   * processors' entries are live.
   */
  async publish(instance: string, oldest: ReadonlyMap<string, number>, now: number, ttlMs = OLDEST_WAITERS_TTL_MS): Promise<number> {
    const ages = [...oldest].flatMap(([scope, since]) => [scope, Math.max(0, Math.round(now - since))]);
    return Number(await this.scripts.run('oldestWaitersPublish', [this.keys.oldestWaiters()], [instance, ttlMs, ...ages]));
  }

  /** Per scope, seconds its longest waiter across every live processor has waited, on Redis's clock. */
  async read(): Promise<Map<string, number>> {
    const replies = (await this.redis.pipeline().time().hgetall(this.keys.oldestWaiters()).exec()) ?? [];
    const [time, entries] = replies.map(([err, value]) => {
      if (err) throw err;
      return value;
    }) as [[string, string], Record<string, string>];
    return oldestAges(entries, Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000));
  }
}
