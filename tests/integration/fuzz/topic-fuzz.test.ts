import fc from 'fast-check';
import { Kafka, logLevel } from 'kafkajs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { topicNames, type TopicNames } from '../../../src/kafka/topics.js';
import { eventually } from '../harness.js';
import { expectDrillInvariants, resetSimStats, settleAndWeigh } from '../../support/drill-invariants.js';
import { DrillLog, MIXED_TENANTS } from '../../support/drill-load.js';
import { startDrillStack, type DrillStack } from '../../support/drill-stack.js';

const PARTITIONS = { interactive: 2, batch: 2, retry: 2, status: 2, dlq: 2, requests: 2 } satisfies Record<keyof TopicNames, number>;
/** Random records per partition, plus one empty record and one without a value (a tombstone). */
const RANDOM_PER_PARTITION = 3;

type Garbage = { topic: string; partition: number; value: Buffer | null };

/**
 * Random bytes produced straight onto every topic a Sluice role consumes (both work topics, the
 * retry topic, the status topic, the ingress topic and the DLQ itself), on every partition. Each record must end as
 * a dead letter in Postgres (`dead_letter_events` of the namespace, exactly once, its bytes kept)
 * and the partitions must keep flowing: runs submitted afterwards complete. The seed is printed;
 * SLUICE_FUZZ_SEED replays it.
 */
describe('topic fuzz: random bytes on every consumed topic', () => {
  let stack: DrillStack;
  let db: pg.Pool;

  beforeAll(async () => {
    db = new pg.Pool({ connectionString: inject('infra').databaseUrl, max: 2 });
    stack = await startDrillStack({ label: 'fuzz-topics', overrides: { kafka: { partitions: PARTITIONS } } });
  });

  afterAll(async () => {
    await stack?.stop();
    await db?.end();
  });

  it('dead-letters every undecodable record once and keeps every partition flowing', async () => {
    const seed = Number(process.env.SLUICE_FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
    console.log(`FUZZ topics: seed=${seed} (SLUICE_FUZZ_SEED=${seed} replays these records)`);
    const topics = topicNames(stack.namespace);
    const slots = (Object.keys(PARTITIONS) as (keyof TopicNames)[]).flatMap((k) => Array.from({ length: PARTITIONS[k] }, (_, partition) => ({ topic: topics[k], partition })));
    const randomValues = fc.sample(fc.uint8Array({ minLength: 1, maxLength: 512 }), { seed, numRuns: slots.length * RANDOM_PER_PARTITION });
    const garbage: Garbage[] = slots.flatMap((slot, i) => [
      ...randomValues.slice(i * RANDOM_PER_PARTITION, (i + 1) * RANDOM_PER_PARTITION).map((v) => ({ ...slot, value: Buffer.from(v) })),
      { ...slot, value: Buffer.alloc(0) },
      { ...slot, value: null },
    ]);

    const producer = new Kafka({ brokers: inject('infra').kafkaBrokers, logLevel: logLevel.NOTHING }).producer();
    await producer.connect();
    try {
      for (const g of garbage) await producer.send({ topic: g.topic, acks: -1, messages: [{ partition: g.partition, key: 'fuzz', value: g.value }] });
    } finally {
      await producer.disconnect();
    }

    // Normal runs afterwards, each tenant and both classes: they queue behind the garbage.
    const log = new DrillLog(stack.api);
    await resetSimStats(stack.sim);
    for (let round = 0; round < 2; round++) {
      for (const s of MIXED_TENANTS) {
        const e = await log.submit(s, { json: { workflow: s.workflow, input: { orderId: `after-garbage-${round}` }, deadlineMs: s.deadlineMs } });
        expect(e.status, `submission by ${s.tenant}`).toBe(202);
      }
    }
    const verdict = await settleAndWeigh({ name: 'topic-fuzz', log, sim: stack.sim, config: stack.config, terminalWithinMs: 45_000, processes: [stack.front] });
    expectDrillInvariants(verdict);
    expect.soft(verdict.byStatus, 'runs submitted after the garbage all complete').toEqual({ completed: log.accepted.size });

    const archived = async () => {
      const { rows } = await db.query<{ original_topic: string; original_partition: number; payload: Buffer }>('SELECT original_topic, original_partition, payload FROM dead_letter_events WHERE namespace = $1', [stack.namespace]);
      return rows;
    };
    const rows = await eventually(
      async () => {
        const r = await archived();
        return r.length >= garbage.length ? r : undefined;
      },
      30_000,
      'every garbage record in the DLQ archive',
      500,
    ).catch(() => archived());
    const byTopic = (list: { topic: string }[]) => Object.fromEntries([...Object.values(topics)].map((t) => [t, list.filter((x) => x.topic === t).length]));
    expect.soft(byTopic(rows.map((r) => ({ topic: r.original_topic }))), 'each garbage record archived exactly once, by topic').toEqual(byTopic(garbage));
    const key = (topic: string, partition: number, payload: Buffer) => `${topic}/${partition}/${payload.toString('hex')}`;
    expect.soft(rows.map((r) => key(r.original_topic, r.original_partition, r.payload)).sort(), 'the archive keeps the bytes as produced').toEqual(garbage.map((g) => key(g.topic, g.partition, g.value ?? Buffer.alloc(0))).sort());
  }, 120_000);
});
