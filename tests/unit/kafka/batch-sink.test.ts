import type { KafkaMessage } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { writeIsolatingRejects, type RejectedRow, type WritePause, type WrittenRows } from '../../../src/db/isolated-write.js';
import { EventDecodeError } from '../../../src/events/codec.js';
import { sinkBatch, type PartitionBatch, type SinkSteps } from '../../../src/kafka/batch-sink.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { metricValue } from '../../support/metric-value.js';
import { connectionRefused, serverError } from '../../support/postgres-errors.js';

const TOPIC = 'sluice.runs.status';
const PARTITION = 3;

/** Records whose values are row names; `poison` does not decode. Offsets from 10. */
const records = (...values: string[]): KafkaMessage[] => values.map((v, i) => ({ offset: String(10 + i), key: null, value: Buffer.from(v), timestamp: '0', attributes: 0, headers: {} }) as KafkaMessage);

/** A partition as kafkajs hands it over, driven by hand: revoke it, go stale, stop. */
function fakePartition(messages: KafkaMessage[]) {
  const seen = { resolved: [] as string[], committedPast: [] as string[], heartbeats: 0 };
  const state = { running: true, stale: false };
  const payload: PartitionBatch = {
    batch: { topic: TOPIC, partition: PARTITION, messages },
    resolveOffset: (offset) => void seen.resolved.push(offset),
    heartbeat: async () => void seen.heartbeats++,
    isRunning: () => state.running,
    isStale: () => state.stale,
  };
  const consumer = {
    commitPast: async (topic: string, partition: number, offset: string) => {
      expect([topic, partition]).toEqual([TOPIC, PARTITION]);
      seen.committedPast.push(offset);
    },
  };
  return { payload, consumer, seen, state };
}

/**
 * A sink over a table that writes rows all or nothing: a row listed in `refuse` fails any write it
 * is part of with that error; `outage` can fail a write first.
 */
function fakeSink(opts: { batchSize?: number; refuse?: Record<string, unknown>; outage?: (call: number) => unknown; poisonFails?: boolean } = {}) {
  const seen = { writes: [] as string[][], written: [] as string[], poison: [] as string[], rejected: [] as string[], settled: 0, pauses: [] as WritePause[] };
  let onPause = (_p: WritePause) => {};
  const steps: SinkSteps<string, WrittenRows<string, string>> = {
    sink: 'status',
    batchSize: opts.batchSize ?? 100,
    decode: async (message) => {
      const value = message.value!.toString();
      if (value.startsWith('poison')) throw new EventDecodeError('bad_magic', 'not a schema-registry frame');
      return value;
    },
    poison: async ({ message }) => {
      if (opts.poisonFails) throw new Error('dlq produce timed out');
      seen.poison.push(message.offset);
    },
    write: async (rows, pause) => {
      const written = await writeIsolatingRejects(
        rows,
        {
          apply: async (batch) => {
            seen.writes.push([...batch]);
            const failure = opts.outage?.(seen.writes.length) ?? batch.map((r) => opts.refuse?.[r]).find((e) => e !== undefined);
            if (failure) throw failure;
            seen.written.push(...batch);
            return batch;
          },
          pause,
        },
      );
      return written.outcome === 'abandoned' ? undefined : written;
    },
    settle: async (written) => {
      seen.settled++;
      seen.rejected.push(...written.rejected.map((r: RejectedRow<string>) => r.item));
    },
    onPause: (p) => {
      seen.pauses.push(p);
      onPause(p);
    },
  };
  return { steps, seen, whenPaused: (f: (p: WritePause) => void) => (onPause = f) };
}

describe('sinkBatch', () => {
  it('commits past each slice once it is written, slice after slice', async () => {
    const p = fakePartition(records('a', 'b', 'c', 'd', 'e'));
    const s = fakeSink({ batchSize: 2 });
    await sinkBatch(p.payload, s.steps, p.consumer, createMetrics());
    expect(s.seen.writes).toEqual([['a', 'b'], ['c', 'd'], ['e']]);
    expect(p.seen.resolved).toEqual(['11', '13', '14']);
    expect(p.seen.committedPast).toEqual(['11', '13', '14']);
    expect(s.seen.settled).toBe(3);
    expect(p.seen.heartbeats).toBe(3);
  });

  it('waits out an outage with backoff while the partition is still owned, then writes once and commits', async () => {
    const p = fakePartition(records('a', 'b'));
    const s = fakeSink({ outage: (call) => (call <= 2 ? connectionRefused() : undefined) });
    const metrics = createMetrics();
    await sinkBatch(p.payload, s.steps, p.consumer, metrics);
    expect(s.seen.pauses.map((x) => [x.cause, x.attempt, x.waitMs])).toEqual([
      ['transient', 1, 100],
      ['transient', 2, 200],
    ]);
    expect(await metricValue(metrics.sinkWriteRetries, { sink: 'status', cause: 'transient' })).toBe(2);
    expect(s.seen.written).toEqual(['a', 'b']);
    expect(p.seen.committedPast).toEqual(['11']);
    // One heartbeat after each wait keeps the partition here, one after the commit.
    expect(p.seen.heartbeats).toBe(3);
  });

  it('gives up without committing once the partition is revoked while it waits', async () => {
    const p = fakePartition(records('a', 'b'));
    const s = fakeSink({ outage: () => connectionRefused() });
    s.whenPaused(() => (p.state.stale = true));
    await sinkBatch(p.payload, s.steps, p.consumer, createMetrics());
    expect(s.seen.pauses).toHaveLength(1);
    expect(s.seen.settled).toBe(0);
    expect(p.seen.resolved).toEqual([]);
    expect(p.seen.committedPast).toEqual([]);
  });

  it('starts no further slice once the batch went stale', async () => {
    const p = fakePartition(records('a', 'b', 'c'));
    const s = fakeSink({ batchSize: 1 });
    const commitPast = p.consumer.commitPast;
    p.consumer.commitPast = async (...args) => {
      await commitPast(...args);
      p.state.stale = true;
    };
    await sinkBatch(p.payload, s.steps, p.consumer, createMetrics());
    expect(s.seen.writes).toEqual([['a']]);
    expect(p.seen.committedPast).toEqual(['10']);
  });

  it('stops waiting when the consumer stops during a backoff, without committing', async () => {
    const p = fakePartition(records('a'));
    const s = fakeSink({ outage: () => connectionRefused() });
    s.whenPaused(() => void setTimeout(() => (p.state.running = false), 10));
    const started = Date.now();
    await sinkBatch(p.payload, s.steps, p.consumer, createMetrics());
    // The first wait (100 ms) is the last: nothing is tried again for a consumer that stopped.
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(s.seen.writes).toHaveLength(1);
    expect(p.seen.committedPast).toEqual([]);
  });

  it('dead-letters a poison record once, skips it and commits past it, even when the write is retried', async () => {
    const p = fakePartition(records('a', 'poison', 'b'));
    const s = fakeSink({ outage: (call) => (call === 1 ? connectionRefused() : undefined) });
    await sinkBatch(p.payload, s.steps, p.consumer, createMetrics());
    expect(s.seen.poison).toEqual(['11']);
    expect(s.seen.written).toEqual(['a', 'b']);
    expect(p.seen.committedPast).toEqual(['12']);
  });

  it('commits nothing while a poison record cannot be dead-lettered', async () => {
    const p = fakePartition(records('a', 'poison'));
    const s = fakeSink({ poisonFails: true });
    await expect(sinkBatch(p.payload, s.steps, p.consumer, createMetrics())).rejects.toThrow('dlq produce timed out');
    expect(s.seen.writes).toEqual([]);
    expect(p.seen.committedPast).toEqual([]);
  });

  it('lets a decode failure that is not poison (the registry is down) fail the batch, so it is read again', async () => {
    const p = fakePartition(records('a'));
    const s = fakeSink();
    s.steps.decode = async () => {
      throw Object.assign(new Error('connect ECONNREFUSED registry'), { code: 'ECONNREFUSED' });
    };
    await expect(sinkBatch(p.payload, s.steps, p.consumer, createMetrics())).rejects.toThrow('ECONNREFUSED');
    expect(s.seen.poison).toEqual([]);
    expect(p.seen.committedPast).toEqual([]);
  });

  it('sets aside the row Postgres refuses for good, writes the others and commits the whole slice', async () => {
    const p = fakePartition(records('a', 'bad', 'c', 'd'));
    const s = fakeSink({ refuse: { bad: serverError('22P05') } });
    await sinkBatch(p.payload, s.steps, p.consumer, createMetrics());
    expect(s.seen.written).toEqual(['a', 'c', 'd']);
    expect(s.seen.rejected).toEqual(['bad']);
    expect(p.seen.committedPast).toEqual(['13']);
  });
});
