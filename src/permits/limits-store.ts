import type { RedisClient } from '../redis/client.js';
import type { RedisKeys } from '../redis/keys.js';

/**
 * Concurrency limits changed at run time, in the hash permits-acquire.lua reads on every
 * acquisition: a change holds on every instance at its next acquisition, with no restart and no
 * broadcast. A field is a scope's name (`global`, `tenant:<id>`, ...); a missing one means "as
 * configured". A single HSET is atomic, so no script is needed to write one.
 */
export class LimitsStore {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: RedisKeys,
  ) {}

  /** Every limit set at run time, by scope name. */
  async overrides(): Promise<Map<string, number>> {
    const fields = await this.redis.hgetall(this.keys.permitLimits());
    return new Map(Object.entries(fields).map(([field, value]) => [field, Number(value)]));
  }

  async set(field: string, limit: number): Promise<void> {
    await this.redis.hset(this.keys.permitLimits(), field, String(limit));
  }
}
