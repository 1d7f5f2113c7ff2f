import type { AdaptiveConcurrencyConfig } from '../config/schema.js';
import type { RedisKeys } from '../redis/keys.js';
import type { LuaScripts } from '../redis/scripts.js';
import type { AdaptiveBounds, LoadSignal } from './adaptive-limit-policy.js';

/** The Redis side of adaptive concurrency: one EVALSHA of lua/adaptive-limit-update.lua per call. */
export class AdaptiveLimitStore {
  constructor(
    private readonly scripts: Pick<LuaScripts, 'run'>,
    private readonly keys: RedisKeys,
  ) {}

  /** Applies a call's signal to the dependency's shared figure; resolves to the figure after it and whether this call cut it. */
  async apply(dependency: string, signal: LoadSignal, bounds: AdaptiveBounds, policy: AdaptiveConcurrencyConfig): Promise<{ limit: number; cut: boolean }> {
    const args = [signal, bounds.min, bounds.max, policy.decreaseFactor, policy.cooldownMs, policy.idleResetMs];
    const [limit, cut] = (await this.scripts.run('adaptiveLimitUpdate', [this.keys.adaptiveLimit(dependency)], args)) as [string, number];
    return { limit: Number(limit), cut: cut === 1 };
  }
}
