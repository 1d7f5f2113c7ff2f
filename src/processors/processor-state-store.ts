import type { RedisClient } from '../redis/client.js';
import type { RedisKeys } from '../redis/keys.js';
import type { LuaScripts } from '../redis/scripts.js';
import { mergeProcessorStates, publishedParts, PROCESSOR_STATE_TTL_MS, type ClusterProcessorState, type ProcessorState } from './processor-state.js';

/**
 * Where every processor publishes, and the console reads, what only a processor knows of itself:
 * how long its oldest run or call has waited per permit scope, its paused partitions and its
 * held runs. One hash, a field per processor, each publication one EVALSHA.
 */
export class ProcessorStateStore {
  constructor(
    private readonly scripts: Pick<LuaScripts, 'run'>,
    private readonly redis: Pick<RedisClient, 'pipeline'>,
    private readonly keys: Pick<RedisKeys, 'processorState'>,
  ) {}

  /**
   * Replaces an instance's entry with its state (waits sent as ages at `now`, on this process's
   * clock); a state with nothing in it removes the entry. Resolves to how many processors'
   * entries are live.
   */
  async publish(instance: string, state: ProcessorState, now: number, ttlMs = PROCESSOR_STATE_TTL_MS): Promise<number> {
    const ages = [...state.oldest].flatMap(([scope, since]) => [scope, Math.max(0, Math.round(now - since))]);
    return Number(await this.scripts.run('processorStatePublish', [this.keys.processorState()], [instance, ttlMs, JSON.stringify(publishedParts(state)), ...ages]));
  }

  /** Every live processor's state, merged; waits measured on Redis's clock. */
  async read(): Promise<ClusterProcessorState> {
    const replies = (await this.redis.pipeline().time().hgetall(this.keys.processorState()).exec()) ?? [];
    const [time, entries] = replies.map(([err, value]) => {
      if (err) throw err;
      return value;
    }) as [[string, string], Record<string, string>];
    return mergeProcessorStates(entries, Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000));
  }
}
