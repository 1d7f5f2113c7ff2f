import { duplicateForSubscribing, requireShardedPubSub, type RedisClient } from './client.js';

export interface ShardedSubscriberHandlers {
  /** A message on one of the subscribed channels (which one: its payload says). */
  message: (payload: string) => void;
  /** The connection is (again) usable: what was announced while it was away is lost. */
  ready: () => void;
  /** The connection closed: until the next `ready`, announcements may be missed. */
  lost?: () => void;
  error: (err: Error) => void;
}

/**
 * Listens on sharded pub/sub channels (SSUBSCRIBE) over a connection of its own. A sharded channel
 * lives in the slot of its name's hash tag, so a script publishes (SPUBLISH) next to the keys it
 * touches, on one server or on the shard of a Redis Cluster that owns them.
 */
export class ShardedSubscriber {
  private readonly connection: RedisClient;
  private readonly channels: ReadonlySet<string>;

  constructor(client: RedisClient, channels: readonly string[], handlers: ShardedSubscriberHandlers) {
    this.channels = new Set(channels);
    this.connection = duplicateForSubscribing(client);
    this.connection.on('smessage', (channel: string, payload: string) => {
      if (this.channels.has(channel)) handlers.message(payload);
    });
    // ioredis subscribes again after a reconnect; on a cluster it also replaces a shard's subscriber
    // after a failover or a slot move (`subscribersReady`), and what was published meanwhile is lost.
    this.connection.on('ready', handlers.ready);
    this.connection.on('subscribersReady', handlers.ready);
    if (handlers.lost) this.connection.on('close', handlers.lost);
    this.connection.on('error', handlers.error);
  }

  ready(): boolean {
    return this.connection.status === 'ready';
  }

  /** Resolves once subscribed to every channel; rejects if Redis cannot be reached or is older than 7. */
  async start(): Promise<void> {
    await requireShardedPubSub(this.connection);
    // One command per channel: channels of different slots may not share an SSUBSCRIBE.
    await Promise.all([...this.channels].map((channel) => this.connection.ssubscribe(channel)));
  }

  async close(): Promise<void> {
    await this.connection.quit().catch(() => this.connection.disconnect());
  }
}
