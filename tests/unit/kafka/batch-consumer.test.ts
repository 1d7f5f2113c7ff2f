import type { Kafka } from 'kafkajs';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, vi } from 'vitest';
import { consumerRestartDelayMs, createBatchConsumer, offsetAfter, partitionKey, splitPartitionKey, type BatchConsumerOptions } from '../../../src/kafka/batch-consumer.js';
import { createLogger } from '../../../src/obs/logger.js';

/** A kafkajs consumer that records what is asked of it; `emit` plays its instrumentation events. */
function fakeKafka(opts: { hang?: 'stop' | 'disconnect' } = {}) {
  const listeners = new Map<string, (e: { payload: unknown }) => void>();
  const calls: string[] = [];
  const paused = new Set<string>();
  /** As kafkajs: a consumer group from `run` until a crash, and again once restarted; without one, pause, resume and seek throw. */
  let group = false;
  const needsGroup = () => {
    if (!group) throw new Error('Consumer group was not initialized, consumer#run must be called first');
  };
  let config: Record<string, unknown> = {};
  const never = new Promise<void>(() => undefined);
  const consumer = {
    events: { GROUP_JOIN: 'consumer.group_join', CRASH: 'consumer.crash' },
    on: (event: string, listener: (e: { payload: unknown }) => void) => void listeners.set(event, listener),
    connect: async () => void calls.push('connect'),
    subscribe: async (s: unknown) => void calls.push(`subscribe ${JSON.stringify(s)}`),
    run: async (r: Record<string, unknown>) => {
      group = true;
      calls.push(`run ${JSON.stringify(r)}`);
    },
    pause: (tps: { topic: string; partitions: number[] }[]) => (needsGroup(), tps.forEach((tp) => tp.partitions.forEach((p) => paused.add(partitionKey(tp.topic, p))))),
    resume: (tps: { topic: string; partitions: number[] }[]) => (needsGroup(), tps.forEach((tp) => tp.partitions.forEach((p) => paused.delete(partitionKey(tp.topic, p))))),
    seek: (s: unknown) => (needsGroup(), void calls.push(`seek ${JSON.stringify(s)}`)),
    commitOffsets: async (offsets: unknown) => void calls.push(`commit ${JSON.stringify(offsets)}`),
    stop: () => (calls.push('stop'), opts.hang === 'stop' ? never : Promise.resolve()),
    disconnect: () => (calls.push('disconnect'), opts.hang === 'disconnect' ? never : Promise.resolve()),
  };
  const kafka = {
    consumer: (c: Record<string, unknown>) => {
      config = c;
      return consumer;
    },
  } as unknown as Kafka;
  const emit = (event: string, payload: unknown) => {
    // A crash disconnects: the group and its pauses are gone; a restarted consumer makes a new, unpaused one.
    if (event === consumer.events.CRASH) (group = false), paused.clear();
    listeners.get(event)!({ payload });
  };
  /** kafkajs's own restart after a retriable crash: a new group, nothing paused, before its join. */
  const restartedByKafkajs = () => void (group = true);
  return { kafka, calls, paused, emit, restartedByKafkajs, config: () => config };
}

function logged() {
  const lines: { level: number; msg: string }[] = [];
  const logger = createLogger('info', 'test', { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { logger, lines };
}

function setup(over: Partial<BatchConsumerOptions> = {}, hang?: 'stop' | 'disconnect') {
  const fake = fakeKafka(hang ? { hang } : {});
  const { logger, lines } = logged();
  const assignments: string[][] = [];
  const consumer = createBatchConsumer({
    kafka: fake.kafka,
    settings: { sessionTimeoutMs: 6_000, heartbeatIntervalMs: 1_000 },
    groupId: 'sluice.status-sink',
    topics: ['sluice.runs.status'],
    maxWaitTimeInMs: 250,
    partitionsConsumedConcurrently: 2,
    eachBatch: async () => undefined,
    onAssignment: (owned) => void assignments.push([...owned].map((k) => splitPartitionKey(k).join(':'))),
    log: logger,
    ...over,
  });
  return { consumer, fake, lines, assignments };
}

describe('createBatchConsumer', () => {
  it('joins with the session settings, never creating topics, and runs with manual commits only', async () => {
    const { consumer, fake } = setup();
    await consumer.start();
    expect(fake.config()).toEqual({ groupId: 'sluice.status-sink', sessionTimeout: 6_000, heartbeatInterval: 1_000, allowAutoTopicCreation: false, maxWaitTimeInMs: 250 });
    expect(fake.calls).toEqual([
      'connect',
      'subscribe {"topics":["sluice.runs.status"],"fromBeginning":true}',
      'run {"autoCommit":false,"eachBatchAutoResolve":false,"partitionsConsumedConcurrently":2}',
    ]);
  });

  it('commits past a handled record: the next offset to read, exact beyond 2^53', async () => {
    const { consumer, fake } = setup();
    await consumer.commitPast('sluice.runs.status', 1, '9007199254740993');
    expect(fake.calls).toEqual(['commit [{"topic":"sluice.runs.status","partition":1,"offset":"9007199254740994"}]']);
    expect(offsetAfter('0')).toBe('1');
  });

  it('resumes a paused partition it lost at a join, and tells what it owns now', async () => {
    const { consumer, fake, assignments } = setup();
    await consumer.start();
    consumer.pause('t', 0);
    consumer.pause('t', 1);
    fake.emit('consumer.group_join', { memberAssignment: { t: [1, 2] } });
    // kafkajs would keep partition 0 paused if it came back: it must not be.
    expect([...fake.paused]).toEqual([partitionKey('t', 1)]);
    expect(assignments).toEqual([['t:1', 't:2']]);
    consumer.resume('t', 1);
    fake.emit('consumer.group_join', { memberAssignment: { t: [2] } });
    expect(fake.paused.size).toBe(0);
  });

  it('stops fetching, drains, then leaves the group', async () => {
    const { consumer, fake } = setup();
    await consumer.stop(async () => void fake.calls.push('drain'));
    expect(fake.calls).toEqual(['stop', 'drain', 'disconnect']);
  });

  it('leaves the group directly when there is nothing to drain', async () => {
    const { consumer, fake } = setup();
    await consumer.stop();
    expect(fake.calls).toEqual(['disconnect']);
  });

  it('bounds each step of a stop by the session timeout', async () => {
    const { consumer, fake, lines } = setup({ settings: { sessionTimeoutMs: 50, heartbeatIntervalMs: 10 } }, 'stop');
    await consumer.stop(async () => void fake.calls.push('drain'));
    expect(fake.calls).toEqual(['stop', 'drain', 'disconnect']);
    expect(lines.map((l) => l.msg)).toEqual(['consumer stop did not finish in time; going on']);
  });

  it('leaves a crash kafkajs restarts from to kafkajs', async () => {
    const { consumer, fake, lines } = setup();
    await consumer.start();
    fake.emit('consumer.crash', { error: new Error('offset out of range'), groupId: 'g', restart: true });
    await sleep(300);
    expect(lines).toEqual([]);
    expect(fake.calls.filter((c) => c === 'connect')).toHaveLength(1);
  });

  it('restarts a consumer kafkajs gave up on, with backoff, and keeps what its reader paused', async () => {
    const { consumer, fake, lines } = setup();
    await consumer.start();
    consumer.pause('t', 0);
    fake.calls.length = 0;
    fake.emit('consumer.crash', { error: new Error('Failed to find group coordinator'), groupId: 'g', restart: false });
    // A second crash report while a restart is due does not schedule another.
    fake.emit('consumer.crash', { error: new Error('Failed to find group coordinator'), groupId: 'g', restart: false });
    expect(lines.map((l) => [l.level, l.msg])).toEqual([[40, 'consumer crashed with an error kafkajs does not restart after; restarting it']]);
    expect(fake.calls).toEqual([]);
    await vi.waitFor(() => expect(fake.calls).toHaveLength(3), { timeout: 2_000 });
    expect(fake.calls[0]).toBe('connect');
    // The restarted consumer fetches everything again until the join puts the reader's pause back.
    fake.emit('consumer.group_join', { memberAssignment: { t: [0, 1] } });
    expect([...fake.paused]).toEqual([partitionKey('t', 0)]);
  });

  it('takes pauses, resumes and seeks while kafkajs has no group after a crash, and the join after its restart fetches exactly what is not paused', async () => {
    const { consumer, fake } = setup();
    await consumer.start();
    consumer.pause('t', 0);
    consumer.pause('t', 1);
    fake.emit('consumer.crash', { error: new Error('Connection error: connect ECONNREFUSED'), groupId: 'g', restart: true });
    // kafkajs has no group until it restarts: none of these may throw into the reader.
    expect(() => consumer.pause('t', 2)).not.toThrow();
    expect(() => consumer.resume('t', 1)).not.toThrow();
    expect(() => consumer.seek('t', 0, '7')).not.toThrow();
    fake.restartedByKafkajs();
    expect(fake.paused.size).toBe(0);
    fake.emit('consumer.group_join', { memberAssignment: { t: [0, 1, 2, 3] } });
    expect([...fake.paused].sort()).toEqual([partitionKey('t', 0), partitionKey('t', 2)]);
    consumer.resume('t', 0);
    expect([...fake.paused]).toEqual([partitionKey('t', 2)]);
  });

  it('keeps restarting while the broker refuses, and not once it is stopped', async () => {
    const { consumer, fake } = setup();
    await consumer.start();
    let refusals = 2;
    const connect = async () => {
      fake.calls.push('connect');
      if (refusals-- > 0) throw new Error('ECONNREFUSED');
    };
    Object.assign(fake.kafka.consumer({ groupId: 'g' }), { connect });
    fake.calls.length = 0;
    fake.emit('consumer.crash', { error: new Error('Failed to find group coordinator'), groupId: 'g', restart: false });
    await vi.waitFor(() => expect(fake.calls.filter((c) => c.startsWith('run'))).toHaveLength(1), { timeout: 3_000 });
    expect(fake.calls.filter((c) => c === 'connect')).toHaveLength(3);
    fake.emit('consumer.crash', { error: new Error('Failed to find group coordinator'), groupId: 'g', restart: false });
    await consumer.stop();
    fake.calls.length = 0;
    await sleep(400);
    expect(fake.calls).toEqual([]);
  });

  it('waits longer after each restart that did not lead to a join, up to 5 s', () => {
    expect([0, 1, 2, 3, 4, 5, 6, 50].map(consumerRestartDelayMs)).toEqual([200, 400, 800, 1_600, 3_200, 5_000, 5_000, 5_000]);
  });
});
