import { randomUUID } from 'node:crypto';
import type { Kafka } from 'kafkajs';
import { withTimeout } from '../../src/util/with-timeout.js';

export interface StatusRecordSeen {
  partition: number;
  offset: string;
  /** The record's Kafka timestamp (epoch ms). */
  timestamp: number;
}

/**
 * Every record on the status topic keyed by one of `runIds` (a status event's key is its run id).
 * For a drill's run left unended, this tells a terminal event that was never produced from one
 * that was produced and not applied by the status sink. Undecoded: the count and offsets are the
 * evidence.
 */
export async function statusRecordsFor(kafka: Kafka, topic: string, runIds: readonly string[], timeoutMs = 30_000): Promise<Record<string, StatusRecordSeen[]>> {
  const found: Record<string, StatusRecordSeen[]> = Object.fromEntries(runIds.map((id) => [id, []]));
  if (runIds.length === 0) return found;
  for (const r of await recordsToEnd(kafka, topic, timeoutMs)) if (Object.hasOwn(found, r.key)) found[r.key]!.push({ partition: r.partition, offset: r.offset, timestamp: r.timestamp });
  return found;
}

/** Every record of `topic` (its key as text), read from the start to the high watermarks as they are now. */
export async function recordsToEnd(kafka: Kafka, topic: string, timeoutMs = 30_000): Promise<(StatusRecordSeen & { key: string })[]> {
  const found: (StatusRecordSeen & { key: string })[] = [];
  const admin = kafka.admin();
  await admin.connect();
  const groupId = `drill-evidence.${randomUUID()}`;
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 200 });
  try {
    const marks = await admin.fetchTopicOffsets(topic);
    const remaining = new Map(marks.filter((m) => BigInt(m.high) > BigInt(m.low)).map((m) => [m.partition, BigInt(m.high)]));
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    const caughtUp = new Promise<void>((resolve) => {
      if (remaining.size === 0) resolve();
      void consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          found.push({ key: message.key?.toString('utf8') ?? '', partition, offset: message.offset, timestamp: Number(message.timestamp) });
          const high = remaining.get(partition);
          if (high !== undefined && BigInt(message.offset) + 1n >= high) remaining.delete(partition);
          if (remaining.size === 0) resolve();
        },
      });
    });
    await withTimeout(caughtUp, timeoutMs, `reading ${topic} to its end`);
    return found;
  } finally {
    await consumer.disconnect().catch(() => undefined);
    await admin.deleteGroups([groupId]).catch(() => undefined);
    await admin.disconnect().catch(() => undefined);
  }
}
