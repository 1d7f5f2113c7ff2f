import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/obs/logger.js';
import { PermitWakeups } from '../../../src/permits/permit-wakeups.js';

const logger = createLogger('silent');

/** The subscriber connection ioredis' duplicate() would open: tests emit its events. */
class FakeSubscriber extends EventEmitter {
  subscribed: string[] = [];
  quits = 0;
  constructor(private readonly version = '7.0.15') {
    super();
  }
  async info() {
    return `# Server\r\nredis_version:${this.version}\r\n`;
  }
  async ssubscribe(channel: string) {
    this.subscribed.push(channel);
    return 1;
  }
  async quit() {
    this.quits++;
    return 'OK';
  }
  disconnect() {}
}

function setup(fallbackPollMs?: number, version?: string) {
  const subscriber = new FakeSubscriber(version);
  let duplicates = 0;
  const redis = {
    duplicate: () => {
      duplicates++;
      return subscriber;
    },
  } as unknown as Redis;
  const wakeups = new PermitWakeups(redis, { channel: 'ch', logger, fallbackPollMs });
  return { subscriber, wakeups, duplicates: () => duplicates };
}

describe('PermitWakeups', () => {
  it('subscribes one duplicated connection to the sharded channel', async () => {
    const { subscriber, wakeups, duplicates } = setup();
    await wakeups.start();
    expect(duplicates()).toBe(1);
    expect(subscriber.subscribed).toEqual(['ch']);
  });

  it('refuses to start on a Redis older than 7 (no sharded pub/sub), saying what it needs', async () => {
    const { subscriber, wakeups } = setup(undefined, '6.2.14');
    await expect(wakeups.start()).rejects.toThrow('Sluice needs Redis 7 or newer (sharded pub/sub, SSUBSCRIBE/SPUBLISH); the server runs 6.2.14');
    expect(subscriber.subscribed).toEqual([]);
  });

  it('fans a release out to every listener with the released scopes, until each unsubscribes', () => {
    const { subscriber, wakeups } = setup();
    const one: unknown[] = [];
    const two: unknown[] = [];
    const stopOne = wakeups.onWake((s) => one.push(s));
    wakeups.onWake((s) => two.push(s));
    subscriber.emit('smessage', 'ch', 'global tenant:acme');
    subscriber.emit('smessage', 'other', 'global');
    stopOne();
    subscriber.emit('smessage', 'ch', 'dependency:anthropic');
    expect(one).toEqual([['global', 'tenant:acme']]);
    expect(two).toEqual([['global', 'tenant:acme'], ['dependency:anthropic']]);
  });

  it('wakes everyone with null after (re)connecting: announcements made meanwhile are lost', () => {
    const { subscriber, wakeups } = setup();
    const seen: unknown[] = [];
    wakeups.onWake((s) => seen.push(s));
    subscriber.emit('ready');
    expect(seen).toEqual([null]);
    // A cluster replaced a shard's subscriber (failover, slot move) and subscribed again.
    subscriber.emit('subscribersReady');
    expect(seen).toEqual([null, null]);
  });

  it('keeps waking the others when a listener throws, and counts one function registered twice twice', () => {
    const { subscriber, wakeups } = setup();
    const seen: unknown[] = [];
    wakeups.onWake(() => {
      throw new Error('broken waiter');
    });
    const listener = (s: unknown) => void seen.push(s);
    wakeups.onWake(listener);
    const stop = wakeups.onWake(listener);
    subscriber.emit('smessage', 'ch', 'global');
    stop();
    subscriber.emit('smessage', 'ch', 'global');
    expect(seen).toHaveLength(3);
  });

  it('bounds the fallback poll interval it tells waiters to use', () => {
    expect(setup().wakeups.fallbackPollMs).toBe(1_000);
    expect(setup(250).wakeups.fallbackPollMs).toBe(250);
    expect(setup(0).wakeups.fallbackPollMs).toBe(50);
    expect(setup(600_000).wakeups.fallbackPollMs).toBe(5_000);
  });

  it('closes its connection and forgets its listeners', async () => {
    const { subscriber, wakeups } = setup();
    const seen: unknown[] = [];
    wakeups.onWake((s) => seen.push(s));
    await wakeups.close();
    subscriber.emit('smessage', 'ch', 'global');
    expect(subscriber.quits).toBe(1);
    expect(seen).toEqual([]);
  });
});
