import type { Message, ProducerRecord } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeadLetterFilter, DeadLetterRow, ReplayOutcome } from '../../../src/dlq/dead-letter-store.js';
import type { ReplayResult } from '../../../src/dlq/replay-outcome.js';
import { nextAttempt } from '../../../src/dlq/replay-plan.js';
import { DeadLetterReplayer, type ReplayKafka } from '../../../src/dlq/replay-runner.js';
import { EventCodec } from '../../../src/events/codec.js';
import { FileSchemaRegistry } from '../../../src/events/file-schema-registry.js';
import { SUBJECTS, type RunRequested } from '../../../src/events/schemas.js';
import { topicNames } from '../../../src/kafka/topics.js';
import { TimeoutError } from '../../../src/util/with-timeout.js';
import { tempDir } from '../events/fixtures.js';
import { deadRow, NOW, run } from './dead-letter-fixtures.js';

const topics = topicNames('ns.');
const POISON = Buffer.from([0xde, 0xad, 0xbe, 0xef]);

/** The archive as the store keeps it: a replay marks a row replayed only when its produce succeeded. */
class FakeArchive {
  readonly rows = new Map<string, DeadLetterRow>();
  readonly listed: DeadLetterFilter[] = [];
  locks = 0;

  constructor(rows: DeadLetterRow[]) {
    for (const row of rows) this.rows.set(row.id, row);
  }

  async list(filter: DeadLetterFilter = {}): Promise<DeadLetterRow[]> {
    this.listed.push(filter);
    return [...this.rows.values()].filter((r) => filter.status === undefined || r.status === filter.status).sort((a, b) => b.failedAt.getTime() - a.failedAt.getTime());
  }

  async get(id: string): Promise<DeadLetterRow | undefined> {
    return this.rows.get(id);
  }

  async replayOne<T>(id: string, who: string, produce: (row: DeadLetterRow) => Promise<T>): Promise<ReplayOutcome<T>> {
    this.locks++;
    const row = this.rows.get(id);
    if (!row) return { id, result: 'skipped', why: 'not_found' };
    if (row.status !== 'pending') return { id, result: 'skipped', why: row.status };
    try {
      const value = await produce(row);
      this.rows.set(id, { ...row, status: 'replayed', replayedBy: who, replayCount: row.replayCount + 1 });
      return { id, result: 'replayed', value };
    } catch (err) {
      return { id, result: 'failed', error: err as Error };
    }
  }
}

function kafka(opts: { hang?: boolean; existing?: string[] } = {}): ReplayKafka & { sent: ProducerRecord[] } {
  const sent: ProducerRecord[] = [];
  return {
    sent,
    existingTopics: new Set(opts.existing ?? Object.values(topics)),
    produceTimeoutMs: 1,
    producer: {
      send: async (record) => {
        sent.push(record);
        if (opts.hang) await new Promise(() => undefined);
        return [];
      },
    },
  };
}

let codec: EventCodec;
let registryDir: Awaited<ReturnType<typeof tempDir>>;
let runBytes: Buffer;

beforeAll(async () => {
  registryDir = await tempDir();
  codec = new EventCodec(new FileSchemaRegistry(registryDir.path));
  runBytes = await codec.encode(SUBJECTS.runRequested, run);
});
afterAll(() => registryDir.remove());

const runRow = (id: string, failedAtOffsetMs = 0) => deadRow({ id, payload: runBytes, failedAt: new Date(NOW + failedAtOffsetMs) });
const poisonRow = (id: string, originalTopic = topics.interactive) => deadRow({ id, payload: POISON, payloadJson: null, originalTopic, originalKey: Buffer.from('k') });

function replayer(archive: FakeArchive): DeadLetterReplayer {
  return new DeadLetterReplayer(archive, codec, topics, () => NOW);
}

describe('DeadLetterReplayer.replay', () => {
  it('produces a run as its next attempt and poison as its bytes, in the given order, no faster than the rate', async () => {
    const archive = new FakeArchive([runRow('1'), poisonRow('2')]);
    const k = kafka();
    const seen: ReplayResult[] = [];
    const started = performance.now();
    const { tally, untried } = await replayer(archive).replay(['1', '2'], k, { by: 'alice@ops', ratePerSec: 20, onOutcome: (o) => seen.push(o) });
    expect(performance.now() - started).toBeGreaterThanOrEqual(45);
    expect(untried).toBe(0);
    expect(tally).toMatchObject({ replayed: 2, refused: 0, failed: 0 });
    expect(seen.map((o) => [o.id, o.result])).toEqual([
      ['1', 'replayed'],
      ['2', 'replayed'],
    ]);
    const [first, second] = k.sent as [ProducerRecord, ProducerRecord];
    expect(first).toMatchObject({ topic: topics.batch, acks: -1, timeout: 1 });
    const message = first.messages[0] as Message;
    expect(message).toMatchObject({ key: 'tenant-a', headers: { traceparent: run.traceparent, 'sluice-replay-of': '1' } });
    expect(await codec.decode<RunRequested>(message.value as Buffer, SUBJECTS.runRequested)).toEqual(nextAttempt(run, NOW));
    expect(second.topic).toBe(topics.interactive);
    expect(second.messages[0]).toEqual({ key: Buffer.from('k'), value: POISON, headers: { 'sluice-replay-of': '2' } });
    expect(archive.rows.get('1')).toMatchObject({ status: 'replayed', replayedBy: 'alice@ops' });
    expect(archive.rows.get('2')).toMatchObject({ status: 'replayed', replayedBy: 'alice@ops' });
  });

  it('skips rows that are gone or done, refuses foreign poison and leaves it pending, producing only the rest', async () => {
    const archive = new FakeArchive([deadRow({ id: '3', status: 'discarded' }), poisonRow('4', 'payments.ledger'), poisonRow('5')]);
    const k = kafka();
    const seen: ReplayResult[] = [];
    const { tally } = await replayer(archive).replay(['9', '3', '4', '5'], k, { by: 'bob', ratePerSec: 1_000, onOutcome: (o) => seen.push(o) });
    expect(seen.map((o) => o.result)).toEqual(['skipped', 'skipped', 'refused', 'replayed']);
    expect(tally).toEqual({ replayed: 1, refused: 1, failed: 0, skipped: { not_found: 1, replayed: 0, discarded: 1, locked: 0 } });
    expect(archive.rows.get('4')).toMatchObject({ status: 'pending', replayCount: 0 });
    expect(k.sent.map((r) => r.messages[0]!.headers)).toEqual([{ 'sluice-replay-of': '5' }]);
  });

  it('fails a row whose topic does not exist, naming the namespace setting, and goes on', async () => {
    const archive = new FakeArchive([runRow('6'), poisonRow('7')]);
    const k = kafka({ existing: [topics.interactive] });
    const seen: ReplayResult[] = [];
    const { tally } = await replayer(archive).replay(['6', '7'], k, { by: 'bob', ratePerSec: 1_000, onOutcome: (o) => seen.push(o) });
    expect(seen[0]).toMatchObject({ id: '6', result: 'failed', error: { message: 'topic ns.sluice.runs.batch does not exist: is the namespace (SLUICE_NAMESPACE) right?' } });
    expect(tally).toMatchObject({ replayed: 1, failed: 1 });
    expect(archive.rows.get('6')!.status).toBe('pending');
    expect(k.sent.map((r) => r.topic)).toEqual([topics.interactive]);
  });

  it('stops at the first produce Kafka does not answer within its bound, leaving that row pending and the rest untried', async () => {
    const archive = new FakeArchive([poisonRow('1'), poisonRow('2'), poisonRow('3')]);
    const k = kafka({ hang: true });
    const seen: ReplayResult[] = [];
    const { tally, untried } = await replayer(archive).replay(['1', '2', '3'], k, { by: 'bob', ratePerSec: 1_000, onOutcome: (o) => seen.push(o) });
    expect(untried).toBe(2);
    expect(tally).toMatchObject({ replayed: 0, failed: 1 });
    expect(seen).toHaveLength(1);
    expect(seen[0]!.result === 'failed' && seen[0]!.error).toBeInstanceOf(TimeoutError);
    expect(archive.locks).toBe(1);
    expect(archive.rows.get('1')!.status).toBe('pending');
  });

  it('sends a record the ingress refused back to the ingress topic as its bytes, even when the archive took it for another tenant’s run', async () => {
    const forged = await codec.encode(SUBJECTS.runRequested, { ...run, tenantId: 'tenant-b' });
    // As a sink before the fix archived it: the producer's bytes decoded into payloadJson.
    const archive = new FakeArchive([deadRow({ id: '9', payload: forged, originalTopic: topics.requests, originalKey: Buffer.from('tenant-c') })]);
    const k = kafka();
    const seen: ReplayResult[] = [];
    await replayer(archive).replay(['9'], k, { by: 'bob', ratePerSec: 1_000, onOutcome: (o) => seen.push(o) });
    expect(seen.map((o) => o.result)).toEqual(['replayed']);
    expect(k.sent.map((r) => r.topic)).toEqual([topics.requests]);
    expect(k.sent[0]!.messages[0]).toEqual({ key: Buffer.from('tenant-c'), value: forged, headers: { 'sluice-replay-of': '9' } });
  });

  it('fails a run that decoded when archived but does not decode now, rather than sending its bytes as poison', async () => {
    const archive = new FakeArchive([deadRow({ id: '8', payload: POISON })]);
    const k = kafka();
    const seen: ReplayResult[] = [];
    await replayer(archive).replay(['8'], k, { by: 'bob', ratePerSec: 1_000, onOutcome: (o) => seen.push(o) });
    expect(seen[0]).toMatchObject({ result: 'failed' });
    expect((seen[0] as { error: Error }).error.message).toMatch(/^the run was decoded when archived but does not decode now \(.+\): is this the schema registry the processors use\?$/);
    expect(k.sent).toEqual([]);
  });
});

describe('DeadLetterReplayer.preview and pendingIds', () => {
  it('says what a replay would do without locking a row or producing', async () => {
    const archive = new FakeArchive([runRow('1'), deadRow({ id: '2', status: 'replayed' }), poisonRow('3', 'payments.ledger')]);
    const seen: ReplayResult[] = [];
    const tally = await replayer(archive).preview(['1', '2', '3', '4'], (o) => seen.push(o));
    expect(seen.map((o) => (o.result === 'skipped' ? o.why : o.result))).toEqual(['replayed', 'replayed', 'refused', 'not_found']);
    expect(seen[0]).toMatchObject({ value: { topic: topics.batch, body: { run: nextAttempt(run, NOW) } } });
    expect(tally).toEqual({ replayed: 1, refused: 1, failed: 0, skipped: { not_found: 1, replayed: 1, discarded: 0, locked: 0 } });
    expect(archive.locks).toBe(0);
    expect(archive.rows.get('1')!.status).toBe('pending');
  });

  it('takes the pending rows a filter matches, oldest first', async () => {
    const archive = new FakeArchive([runRow('10', 2_000), runRow('11', 1_000), deadRow({ id: '12', status: 'discarded' }), runRow('13', 3_000)]);
    expect(await replayer(archive).pendingIds({ tenant: 'tenant-a', status: 'discarded', limit: 5 })).toEqual(['11', '10', '13']);
    expect(archive.listed).toEqual([{ tenant: 'tenant-a', status: 'pending', limit: 5 }]);
  });
});
