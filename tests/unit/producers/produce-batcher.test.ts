import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  HEADER_OVERHEAD_BYTES,
  MessageTooLargeError,
  ProduceBatcher,
  ProduceQueueFullError,
  ProduceTimeoutError,
  ProducerClosedError,
  RECORD_OVERHEAD_BYTES,
  mayHaveReachedKafka,
  recordBytes,
  type OutgoingMessage,
  type ProduceBatcherOptions,
  type SendBatch,
} from '../../../src/producers/produce-batcher.js';

interface SendCall {
  messages: OutgoingMessage[];
  /** Kafka answered: with the errors of the messages it did not acknowledge, by position. */
  resolve: (failures?: readonly (Error | undefined)[]) => void;
  reject: (err: Error) => void;
}

/** A `send` whose every call stays in flight until the test settles it. */
function controlledSend(): { send: SendBatch; calls: SendCall[] } {
  const calls: SendCall[] = [];
  const send: SendBatch = (messages) =>
    new Promise<readonly (Error | undefined)[] | void>((resolve, reject) => {
      calls.push({ messages: [...messages], resolve, reject });
    });
  return { send, calls };
}

interface Tracked {
  settled: boolean;
  resolved: boolean;
  error: unknown;
}

/** Observes a promise's outcome without awaiting it (and without unhandled rejections). */
function track(p: Promise<void>): Tracked {
  const t: Tracked = { settled: false, resolved: false, error: undefined };
  p.then(
    () => {
      t.settled = true;
      t.resolved = true;
    },
    (err: unknown) => {
      t.settled = true;
      t.error = err;
    },
  );
  return t;
}

const msg = (n: number): OutgoingMessage => ({ topic: 'sluice.runs.interactive', key: `tenant-${n}`, value: Buffer.from(`value-${n}`), headers: { n: String(n) } });
const keys = (messages: OutgoingMessage[]) => messages.map((m) => m.key);
const tick = () => vi.advanceTimersByTimeAsync(0);

function batcher(opts: Partial<ProduceBatcherOptions> = {}) {
  const { send, calls } = controlledSend();
  const b = new ProduceBatcher(send, { maxBatch: 100, maxBatchBytes: 1_000_000, lingerMs: 10, maxPending: 100, ...opts });
  return { b, calls };
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('ProduceBatcher batching', () => {
  it('groups produce calls made within the linger into one send, in call order', async () => {
    const { b, calls } = batcher({ lingerMs: 10 });
    const t = [1, 2, 3].map((n) => track(b.produce(msg(n), 1_000)));
    expect(b.pending).toBe(3);
    await vi.advanceTimersByTimeAsync(9);
    expect(calls).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(calls).toHaveLength(1);
    expect(calls[0]!.messages).toEqual([msg(1), msg(2), msg(3)]);
    expect(b.pending).toBe(0);
    expect(t.some((x) => x.settled)).toBe(false);
    calls[0]!.resolve();
    await tick();
    expect(t.every((x) => x.resolved)).toBe(true);
  });

  it('hands each message object to send unchanged', async () => {
    const { b, calls } = batcher({ lingerMs: 0 });
    const m = msg(7);
    void b.produce(m, 1_000);
    await tick();
    expect(calls[0]!.messages[0]).toBe(m);
  });

  it('sends at once when the linger is 0', async () => {
    const { b, calls } = batcher({ lingerMs: 0 });
    const t = track(b.produce(msg(1), 1_000));
    expect(calls).toHaveLength(1);
    expect(keys(calls[0]!.messages)).toEqual(['tenant-1']);
    calls[0]!.resolve();
    await tick();
    expect(t.resolved).toBe(true);
  });

  it('splits a backlog larger than maxBatch into several sends, each message exactly once', async () => {
    const { b, calls } = batcher({ maxBatch: 2, lingerMs: 10 });
    const t = [1, 2, 3, 4, 5].map((n) => track(b.produce(msg(n), 10_000)));
    await vi.advanceTimersByTimeAsync(10);
    expect(calls).toHaveLength(1);
    expect(keys(calls[0]!.messages)).toEqual(['tenant-1', 'tenant-2']);
    expect(b.pending).toBe(3);

    calls[0]!.resolve();
    await tick();
    // A full batch is waiting: no linger before it goes.
    expect(calls).toHaveLength(2);
    expect(keys(calls[1]!.messages)).toEqual(['tenant-3', 'tenant-4']);

    calls[1]!.resolve();
    await tick();
    expect(calls).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(10);
    expect(calls).toHaveLength(3);
    expect(keys(calls[2]!.messages)).toEqual(['tenant-5']);
    calls[2]!.resolve();
    await tick();
    expect(t.every((x) => x.resolved)).toBe(true);
    expect(calls.flatMap((c) => keys(c.messages))).toEqual(['tenant-1', 'tenant-2', 'tenant-3', 'tenant-4', 'tenant-5']);
  });

  it('sends a full batch without waiting for the rest of the linger', async () => {
    const { b, calls } = batcher({ maxBatch: 2, lingerMs: 1_000 });
    void b.produce(msg(1), 10_000);
    void b.produce(msg(2), 10_000);
    await tick();
    expect(calls).toHaveLength(1);
    expect(keys(calls[0]!.messages)).toEqual(['tenant-1', 'tenant-2']);
  });
});

describe('ProduceBatcher keeps one send in flight', () => {
  it('holds messages produced during a send until it settles, then sends them together', async () => {
    const { b, calls } = batcher({ lingerMs: 0 });
    const t1 = track(b.produce(msg(1), 10_000));
    const t2 = track(b.produce(msg(2), 10_000));
    const t3 = track(b.produce(msg(3), 10_000));
    await vi.advanceTimersByTimeAsync(100);
    expect(calls).toHaveLength(1);
    expect(b.pending).toBe(2);

    calls[0]!.resolve();
    await tick();
    expect(t1.resolved).toBe(true);
    expect(calls).toHaveLength(2);
    expect(keys(calls[1]!.messages)).toEqual(['tenant-2', 'tenant-3']);
    expect(t2.settled || t3.settled).toBe(false);

    calls[1]!.resolve();
    await tick();
    expect(t2.resolved && t3.resolved).toBe(true);
  });

  it('does not start a second batch after its linger while the first is still in flight', async () => {
    const { b, calls } = batcher({ lingerMs: 5 });
    void b.produce(msg(1), 10_000);
    await vi.advanceTimersByTimeAsync(5);
    expect(calls).toHaveLength(1);
    void b.produce(msg(2), 10_000);
    await vi.advanceTimersByTimeAsync(500);
    expect(calls).toHaveLength(1);

    calls[0]!.resolve();
    await tick();
    await vi.advanceTimersByTimeAsync(5);
    expect(calls).toHaveLength(2);
    expect(keys(calls[1]!.messages)).toEqual(['tenant-2']);
  });
});

describe('ProduceBatcher bounds', () => {
  it('refuses a message when maxPending are waiting, with ProduceQueueFullError', async () => {
    const { b, calls } = batcher({ maxPending: 2, lingerMs: 100 });
    const t1 = track(b.produce(msg(1), 10_000));
    const t2 = track(b.produce(msg(2), 10_000));
    const err = await b.produce(msg(3), 10_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProduceQueueFullError);
    expect((err as Error).name).toBe('ProduceQueueFullError');
    expect((err as Error).message).toBe('produce queue is full (2 messages waiting for Kafka)');
    expect(b.pending).toBe(2);

    await vi.advanceTimersByTimeAsync(100);
    expect(keys(calls[0]!.messages)).toEqual(['tenant-1', 'tenant-2']);
    // Messages in flight no longer count against the queue.
    expect(b.pending).toBe(0);
    const t4 = track(b.produce(msg(4), 10_000));
    await tick();
    expect(t4.settled).toBe(false);
    calls[0]!.resolve();
    await tick();
    expect(t1.resolved && t2.resolved).toBe(true);
    await vi.advanceTimersByTimeAsync(100);
    expect(keys(calls[1]!.messages)).toEqual(['tenant-4']);
    expect(calls.flatMap((c) => keys(c.messages))).not.toContain('tenant-3');
  });

  it('withdraws a message whose timeout passes before it is sent (maybeProduced=false)', async () => {
    const { b, calls } = batcher({ lingerMs: 100 });
    const t1 = track(b.produce(msg(1), 50));
    const t2 = track(b.produce(msg(2), 1_000));
    await vi.advanceTimersByTimeAsync(50);
    expect(t1.error).toBeInstanceOf(ProduceTimeoutError);
    const err = t1.error as ProduceTimeoutError;
    expect(err.name).toBe('ProduceTimeoutError');
    expect(err.maybeProduced).toBe(false);
    expect(err.timeoutMs).toBe(50);
    expect(err.message).toBe('Kafka did not acknowledge within 50 ms (message withdrawn, never sent)');
    expect(b.pending).toBe(1);

    await vi.advanceTimersByTimeAsync(50);
    expect(calls).toHaveLength(1);
    expect(keys(calls[0]!.messages)).toEqual(['tenant-2']);
    calls[0]!.resolve();
    await tick();
    expect(t2.resolved).toBe(true);
  });

  it('never calls send when the only message expired before the linger', async () => {
    const { b, calls } = batcher({ lingerMs: 100 });
    const t = track(b.produce(msg(1), 20));
    await vi.advanceTimersByTimeAsync(500);
    expect((t.error as ProduceTimeoutError).maybeProduced).toBe(false);
    expect(calls).toHaveLength(0);
    expect(b.pending).toBe(0);
  });

  it('withdraws a message that times out while waiting behind an in-flight batch', async () => {
    const { b, calls } = batcher({ lingerMs: 0 });
    const t1 = track(b.produce(msg(1), 10_000));
    const t2 = track(b.produce(msg(2), 20));
    await vi.advanceTimersByTimeAsync(20);
    expect((t2.error as ProduceTimeoutError).maybeProduced).toBe(false);
    calls[0]!.resolve();
    await vi.advanceTimersByTimeAsync(100);
    expect(t1.resolved).toBe(true);
    expect(calls).toHaveLength(1);
  });

  it('reports maybeProduced=true when the timeout passes while the message is in flight', async () => {
    const { b, calls } = batcher({ lingerMs: 0 });
    const t1 = track(b.produce(msg(1), 30));
    expect(calls).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(30);
    const err = t1.error as ProduceTimeoutError;
    expect(err).toBeInstanceOf(ProduceTimeoutError);
    expect(err.maybeProduced).toBe(true);
    expect(err.timeoutMs).toBe(30);
    expect(err.message).toBe('Kafka did not acknowledge within 30 ms');

    // The late acknowledgement changes nothing for the caller, and the next message flows.
    calls[0]!.resolve();
    await tick();
    expect(t1.resolved).toBe(false);
    const t2 = track(b.produce(msg(2), 1_000));
    await tick();
    expect(calls).toHaveLength(2);
    calls[1]!.resolve();
    await tick();
    expect(t2.resolved).toBe(true);
  });

  it('clears every timer once a batch is acknowledged', async () => {
    const { b, calls } = batcher({ lingerMs: 5 });
    const t = [1, 2].map((n) => track(b.produce(msg(n), 60_000)));
    await vi.advanceTimersByTimeAsync(5);
    calls[0]!.resolve();
    await tick();
    expect(t.every((x) => x.resolved)).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
  });
});

/** A message (no headers) whose `recordBytes` is exactly `bytes`. */
function sized(n: number, bytes: number): OutgoingMessage {
  const key = `tenant-${n}`;
  return { topic: 'sluice.runs.interactive', key, value: Buffer.alloc(bytes - RECORD_OVERHEAD_BYTES - key.length) };
}

describe('recordBytes', () => {
  it('counts key, value and each header in UTF-8 bytes, with their framing at its largest', () => {
    const m: OutgoingMessage = { topic: 't', key: 'ключ', value: Buffer.alloc(100), headers: { traceparent: 'x'.repeat(55), 'sluice-dlt-reason': 'décodé' } };
    expect(recordBytes(m)).toBe(RECORD_OVERHEAD_BYTES + 8 + 100 + HEADER_OVERHEAD_BYTES + 11 + 55 + HEADER_OVERHEAD_BYTES + 17 + 8);
  });

  it('counts no headers as none, and the framing of each record', () => {
    expect(recordBytes({ topic: 't', key: '', value: Buffer.alloc(0) })).toBe(RECORD_OVERHEAD_BYTES);
    expect(recordBytes(sized(1, 500))).toBe(500);
  });

  it('leaves room for the largest varints of a record and of a header', () => {
    // length, attributes, timestamp delta (varlong), offset delta, key length, value length, header count
    expect(RECORD_OVERHEAD_BYTES).toBeGreaterThanOrEqual(5 + 1 + 10 + 5 + 5 + 5 + 5);
    expect(HEADER_OVERHEAD_BYTES).toBeGreaterThanOrEqual(5 + 5);
  });
});

describe('ProduceBatcher byte bound', () => {
  it('refuses a message larger than maxBatchBytes at once, alone, without queueing or sending it', async () => {
    const { b, calls } = batcher({ maxBatchBytes: 1_000, lingerMs: 10 });
    const before = track(b.produce(sized(1, 300), 10_000));
    const err = await b.produce(sized(2, 1_001), 10_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(MessageTooLargeError);
    const tooLarge = err as MessageTooLargeError;
    expect(tooLarge.name).toBe('MessageTooLargeError');
    expect(tooLarge.bytes).toBe(1_001);
    expect(tooLarge.limit).toBe(1_000);
    expect(tooLarge.message).toBe('message of 1001 bytes is over the 1000-byte bound of one Kafka produce request');
    const after = track(b.produce(sized(3, 300), 10_000));
    expect(b.pending).toBe(2);

    await vi.advanceTimersByTimeAsync(10);
    expect(calls).toHaveLength(1);
    expect(keys(calls[0]!.messages)).toEqual(['tenant-1', 'tenant-3']);
    calls[0]!.resolve();
    await tick();
    expect(before.resolved && after.resolved).toBe(true);
  });

  it('answers a closed batcher first, then an oversized message, then a full queue', async () => {
    const { b } = batcher({ maxBatchBytes: 1_000, maxPending: 1, lingerMs: 100 });
    void b.produce(sized(1, 100), 10_000);
    expect(await b.produce(sized(2, 5_000), 10_000).catch((e: unknown) => e)).toBeInstanceOf(MessageTooLargeError);
    expect(await b.produce(sized(3, 100), 10_000).catch((e: unknown) => e)).toBeInstanceOf(ProduceQueueFullError);
    void b.close();
    expect(await b.produce(sized(4, 5_000), 10_000).catch((e: unknown) => e)).toBeInstanceOf(ProducerClosedError);
  });

  it('accepts a message of exactly maxBatchBytes and sends it alone', async () => {
    const { b, calls } = batcher({ maxBatchBytes: 1_000, lingerMs: 10 });
    const t = [track(b.produce(sized(1, 1_000), 10_000)), track(b.produce(sized(2, 60), 10_000))];
    await tick();
    expect(calls).toHaveLength(1);
    expect(keys(calls[0]!.messages)).toEqual(['tenant-1']);
    calls[0]!.resolve();
    await vi.advanceTimersByTimeAsync(10);
    expect(keys(calls[1]!.messages)).toEqual(['tenant-2']);
    calls[1]!.resolve();
    await tick();
    expect(t.every((x) => x.resolved)).toBe(true);
  });

  it('splits queued messages into requests of at most maxBatchBytes, in order, each message once', async () => {
    const { b, calls } = batcher({ maxBatchBytes: 1_000, lingerMs: 10 });
    const sizes = [400, 400, 300, 900, 100, 100, 100, 700, 300];
    const t = sizes.map((bytes, i) => track(b.produce(sized(i + 1, bytes), 60_000)));
    for (let i = 0; i < 10 && t.some((x) => !x.settled); i++) {
      await vi.advanceTimersByTimeAsync(10);
      calls.at(-1)?.resolve();
      await tick();
    }
    expect(t.every((x) => x.resolved)).toBe(true);
    expect(calls.map((c) => keys(c.messages))).toEqual([
      ['tenant-1', 'tenant-2'],
      ['tenant-3'],
      ['tenant-4', 'tenant-5'],
      ['tenant-6', 'tenant-7', 'tenant-8'],
      ['tenant-9'],
    ]);
    for (const c of calls) expect(c.messages.reduce((n, m) => n + recordBytes(m), 0)).toBeLessThanOrEqual(1_000);
  });

  it('never lets a small message overtake a large one that did not fit the previous request', async () => {
    const { b, calls } = batcher({ maxBatchBytes: 1_000, lingerMs: 0 });
    void b.produce(sized(1, 600), 10_000);
    void b.produce(sized(2, 600), 10_000);
    void b.produce(sized(3, 60), 10_000);
    expect(keys(calls[0]!.messages)).toEqual(['tenant-1']);
    calls[0]!.resolve();
    await tick();
    expect(keys(calls[1]!.messages)).toEqual(['tenant-2', 'tenant-3']);
  });

  it('bounds by count and by bytes, whichever comes first', async () => {
    const byCount = batcher({ maxBatch: 2, maxBatchBytes: 1_000, lingerMs: 10 });
    for (let i = 1; i <= 3; i++) void byCount.b.produce(sized(i, 100), 10_000);
    await tick();
    expect(keys(byCount.calls[0]!.messages)).toEqual(['tenant-1', 'tenant-2']);
    const byBytes = batcher({ maxBatch: 3, maxBatchBytes: 1_000, lingerMs: 10 });
    for (let i = 1; i <= 3; i++) void byBytes.b.produce(sized(i, 400), 10_000);
    await tick();
    expect(keys(byBytes.calls[0]!.messages)).toEqual(['tenant-1', 'tenant-2']);
  });

  it('sends at once, without the rest of the linger, when the queued bytes fill a request', async () => {
    const { b, calls } = batcher({ maxBatchBytes: 1_000, lingerMs: 1_000 });
    void b.produce(sized(1, 600), 10_000);
    await tick();
    expect(calls).toHaveLength(0);
    void b.produce(sized(2, 400), 10_000);
    await tick();
    expect(calls).toHaveLength(1);
    expect(keys(calls[0]!.messages)).toEqual(['tenant-1', 'tenant-2']);
  });

  it('forgets the bytes of a message withdrawn by its timeout, so the next one lingers again', async () => {
    const { b, calls } = batcher({ maxBatchBytes: 1_000, lingerMs: 100 });
    const withdrawn = track(b.produce(sized(1, 600), 5));
    void b.produce(sized(2, 300), 10_000);
    await vi.advanceTimersByTimeAsync(5);
    expect((withdrawn.error as ProduceTimeoutError).maybeProduced).toBe(false);
    void b.produce(sized(3, 600), 10_000);
    await tick();
    expect(calls).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(95);
    expect(keys(calls[0]!.messages)).toEqual(['tenant-2', 'tenant-3']);
  });

  it('forgets the bytes of a sent request, so what is left behind it lingers again', async () => {
    const { b, calls } = batcher({ maxBatchBytes: 1_000, lingerMs: 50 });
    void b.produce(sized(1, 900), 10_000);
    void b.produce(sized(2, 900), 10_000);
    await tick();
    expect(keys(calls[0]!.messages)).toEqual(['tenant-1']);
    calls[0]!.resolve();
    await tick();
    expect(calls).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(50);
    expect(keys(calls[1]!.messages)).toEqual(['tenant-2']);
  });
});

describe('ProduceBatcher send failures', () => {
  it('rejects every message of the failed batch with the send error, but not the next batch', async () => {
    const { b, calls } = batcher({ lingerMs: 10 });
    const t1 = track(b.produce(msg(1), 10_000));
    const t2 = track(b.produce(msg(2), 10_000));
    await vi.advanceTimersByTimeAsync(10);
    const t3 = track(b.produce(msg(3), 10_000));

    const boom = new Error('NOT_ENOUGH_REPLICAS');
    calls[0]!.reject(boom);
    await tick();
    expect(t1.error).toBe(boom);
    expect(t2.error).toBe(boom);
    expect(t3.settled).toBe(false);

    await vi.advanceTimersByTimeAsync(10);
    expect(calls).toHaveLength(2);
    expect(keys(calls[1]!.messages)).toEqual(['tenant-3']);
    calls[1]!.resolve();
    await tick();
    expect(t3.resolved).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('settles each message of an answered batch on its own: the ones Kafka did not acknowledge fail, the others resolve', async () => {
    const { b, calls } = batcher({ lingerMs: 10 });
    const tracked = [1, 2, 3].map((n) => track(b.produce(msg(n), 10_000)));
    await vi.advanceTimersByTimeAsync(10);
    const leftOut = new Error('not acknowledged');
    calls[0]!.resolve([undefined, leftOut]);
    await tick();
    expect(tracked.map((t) => (t.resolved ? 'resolved' : t.error))).toEqual(['resolved', leftOut, 'resolved']);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('treats a send that throws synchronously like a failed send', async () => {
    let n = 0;
    const b = new ProduceBatcher(
      () => {
        n += 1;
        if (n === 1) throw new Error('sync failure');
        return Promise.resolve();
      },
      { maxBatch: 10, maxBatchBytes: 1_000_000, lingerMs: 0, maxPending: 10 },
    );
    const first = await b.produce(msg(1), 1_000).catch((e: unknown) => e);
    expect((first as Error).message).toBe('sync failure');
    await expect(b.produce(msg(2), 1_000)).resolves.toBeUndefined();
  });
});

describe('ProduceBatcher close', () => {
  it('resolves at once when nothing is pending and then refuses new messages', async () => {
    const { b, calls } = batcher();
    await b.close();
    const err = await b.produce(msg(1), 1_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProducerClosedError);
    expect((err as Error).name).toBe('ProducerClosedError');
    expect((err as Error).message).toBe('producer is closed');
    expect(calls).toHaveLength(0);
  });

  it('refuses new messages while it waits for the pending ones, and sends those', async () => {
    const { b, calls } = batcher({ lingerMs: 0 });
    const t1 = track(b.produce(msg(1), 10_000));
    const t2 = track(b.produce(msg(2), 10_000));
    const closing = track(b.close());

    const refused = await b.produce(msg(3), 10_000).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ProducerClosedError);

    await vi.advanceTimersByTimeAsync(50);
    expect(closing.settled).toBe(false);
    calls[0]!.resolve();
    await vi.advanceTimersByTimeAsync(5);
    expect(t1.resolved).toBe(true);
    expect(calls).toHaveLength(2);
    expect(keys(calls[1]!.messages)).toEqual(['tenant-2']);
    expect(closing.settled).toBe(false);

    calls[1]!.resolve();
    await vi.advanceTimersByTimeAsync(10);
    expect(t2.resolved).toBe(true);
    expect(closing.resolved).toBe(true);
    expect(calls.flatMap((c) => keys(c.messages))).not.toContain('tenant-3');
  });

  it('flushes a lingering batch and resolves once it is acknowledged', async () => {
    const { b, calls } = batcher({ lingerMs: 50 });
    const t1 = track(b.produce(msg(1), 10_000));
    const closing = track(b.close());
    await vi.advanceTimersByTimeAsync(50);
    expect(calls).toHaveLength(1);
    expect(closing.settled).toBe(false);
    calls[0]!.resolve();
    await vi.advanceTimersByTimeAsync(10);
    expect(t1.resolved).toBe(true);
    expect(closing.resolved).toBe(true);
  });

  it('waits no longer than the pending messages’ own timeouts, even if send never returns', async () => {
    const { b, calls } = batcher({ lingerMs: 0 });
    const t1 = track(b.produce(msg(1), 100));
    const closing = track(b.close());
    expect(calls).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(100);
    expect((t1.error as ProduceTimeoutError).maybeProduced).toBe(true);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(closing.settled).toBe(true);
  });
});

describe('mayHaveReachedKafka', () => {
  it('is false only for a message refused or withdrawn before it was handed to the client', () => {
    expect(mayHaveReachedKafka(new ProduceQueueFullError(10))).toBe(false);
    expect(mayHaveReachedKafka(new MessageTooLargeError(2, 1))).toBe(false);
    expect(mayHaveReachedKafka(new ProducerClosedError())).toBe(false);
    expect(mayHaveReachedKafka(new ProduceTimeoutError(5_000, false))).toBe(false);
    expect(mayHaveReachedKafka(new ProduceTimeoutError(5_000, true))).toBe(true);
    expect(mayHaveReachedKafka(new Error('broker gone mid-request'))).toBe(true);
  });
});
