import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/obs/logger.js';
import { RunEventFeed } from '../../../src/status/run-event-feed.js';
import { RUN_EVENTS_CHANNEL } from '../../../src/status/run-store.js';
import { FakeListenConnection } from '../../support/run-status-fakes.js';

const RUN_1 = '0190f5a2-7c00-7abc-8def-000000000001';
const RUN_2 = '0190f5a2-7c00-7abc-8def-000000000002';

let feed: RunEventFeed | undefined;
afterEach(async () => {
  await feed?.close();
  feed = undefined;
});

/** A feed whose connections fail for the first `failures` attempts. */
function makeFeed(opts: { failures?: number; maxSubscribers?: number } = {}) {
  const connections: FakeListenConnection[] = [];
  let attempts = 0;
  feed = new RunEventFeed({
    connect: () => {
      const c = new FakeListenConnection(attempts++ < (opts.failures ?? 0));
      connections.push(c);
      return c.asClient();
    },
    logger: createLogger('silent'),
    maxSubscribers: opts.maxSubscribers,
    initialBackoffMs: 5,
    maxBackoffMs: 20,
  });
  return { feed, connections };
}

async function until(check: () => boolean, what: string): Promise<void> {
  const end = Date.now() + 2_000;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('RunEventFeed', () => {
  it('listens on the channel and wakes only the subscribers of the announced run', async () => {
    const { feed, connections } = makeFeed();
    await feed.start();
    expect(connections[0]!.queries).toEqual([`LISTEN ${RUN_EVENTS_CHANNEL}`]);
    const woken: string[] = [];
    feed.subscribe(RUN_1, () => woken.push('a'));
    feed.subscribe(RUN_1, () => woken.push('b'));
    feed.subscribe(RUN_2, () => woken.push('c'));

    connections[0]!.notify(RUN_1);
    expect(woken.sort()).toEqual(['a', 'b']);
    connections[0]!.notify('0190f5a2-7c00-7abc-8def-00000000ffff');
    expect(woken).toHaveLength(2);
  });

  it('bounds its subscribers; unsubscribing frees a slot, and twice is harmless', async () => {
    const { feed, connections } = makeFeed({ maxSubscribers: 2 });
    await feed.start();
    let woken = 0;
    const wake = () => woken++;
    const first = feed.subscribe(RUN_1, wake)!;
    expect(feed.subscribe(RUN_1, wake)).toBeDefined();
    expect(feed.subscribe(RUN_2, wake)).toBeUndefined();
    first();
    first();
    expect(feed.subscribe(RUN_2, wake)).toBeDefined();
    expect(feed.subscribe(RUN_2, wake)).toBeUndefined();
    connections[0]!.notify(RUN_1);
    expect(woken).toBe(1);
  });

  it('reconnects with backoff after losing its connection, and then wakes every subscriber', async () => {
    const { feed, connections } = makeFeed();
    await feed.start();
    const woken: string[] = [];
    feed.subscribe(RUN_1, () => woken.push(RUN_1));
    feed.subscribe(RUN_2, () => woken.push(RUN_2));

    connections[0]!.emit('error', new Error('terminating connection due to administrator command'));
    expect(connections[0]!.ended).toBe(true);
    await until(() => connections.length === 2 && connections[1]!.queries.length === 1, 'the reconnection');
    await until(() => woken.length === 2, 'the wake-up after reconnecting');
    expect(woken.sort()).toEqual([RUN_1, RUN_2].sort());

    connections[1]!.notify(RUN_2);
    expect(woken.filter((r) => r === RUN_2)).toHaveLength(2);
  });

  it('keeps trying when Postgres refuses the first connections', async () => {
    const { feed, connections } = makeFeed({ failures: 3 });
    await feed.start();
    await until(() => connections.length === 4 && connections[3]!.queries.length === 1, 'a successful connection');
    let woken = 0;
    feed.subscribe(RUN_1, () => woken++);
    connections[3]!.notify(RUN_1);
    expect(woken).toBe(1);
  });

  it('closes its connection and stops reconnecting', async () => {
    const { feed, connections } = makeFeed();
    await feed.start();
    await feed.close();
    expect(connections[0]!.ended).toBe(true);
    await new Promise((r) => setTimeout(r, 50));
    expect(connections).toHaveLength(1);
  });

  it('does not reconnect when closed while waiting to', async () => {
    const { feed, connections } = makeFeed({ failures: 100 });
    await feed.start();
    await feed.close();
    await new Promise((r) => setTimeout(r, 50));
    expect(connections).toHaveLength(1);
  });
});
