import { describe, expect, it } from 'vitest';
import { buildDeadLetter, DLQ_HEADER } from '../../../src/dlq/dead-letter.js';
import { archiveRow, decodeDeadLetter, rawRecordRow, RAW_ROW_REASON } from '../../../src/dlq/dlq-sink.js';
import { EventDecodeError } from '../../../src/events/codec.js';
import { SchemaRegistryError } from '../../../src/events/schema-registry.js';
import { SUBJECTS, type DeadLetterEnvelope, type RunRequested } from '../../../src/events/schemas.js';
import { topicNames } from '../../../src/kafka/topics.js';

const AT = Date.UTC(2026, 10, 30, 1, 0, 0);

describe('archive rows', () => {
  it('keeps every envelope field, the headers, the reason header and the decoded run', () => {
    const run = { runId: '0190f5a2-7c00-7abc-8def-0123456789ab', tenantId: 'tenant-c', workflow: 'support-reply', attempt: 2 } as RunRequested;
    const err = new Error('HTTP 500');
    err.name = 'dependency_unavailable';
    const { envelope, headers } = buildDeadLetter({
      topic: 'sluice.runs.interactive',
      partition: 3,
      message: { offset: '41', key: Buffer.from('tenant-c'), value: Buffer.from('bytes') },
      consumerGroup: 'sluice.processor',
      reason: 'dependency_unavailable',
      error: err,
      attempts: 2,
      firstFailureAt: AT - 5_000,
      lastFailureAt: AT,
      run,
    });
    const row = archiveRow(envelope, headers, run);
    expect(row).toMatchObject({
      originalTopic: 'sluice.runs.interactive',
      originalPartition: 3,
      originalOffset: '41',
      consumerGroup: 'sluice.processor',
      tenantId: 'tenant-c',
      workflow: 'support-reply',
      runId: run.runId,
      reason: 'dependency_unavailable',
      payloadJson: run,
      errorClass: 'dependency_unavailable',
      errorMessage: 'HTTP 500',
      attempts: 2,
      firstFailedAt: AT - 5_000,
      failedAt: AT,
    });
    expect(row.payload.toString()).toBe('bytes');
    expect(row.originalKey!.toString()).toBe('tenant-c');
    expect(row.headers[DLQ_HEADER.runId]).toBe(run.runId);
  });

  it('calls a DLQ record without a reason header "unknown" rather than dropping it', () => {
    const { envelope } = buildDeadLetter({ topic: 't', partition: 0, message: { offset: '0', key: null, value: null }, consumerGroup: 'g', reason: 'decode_error', error: new Error('e'), attempts: 1, firstFailureAt: AT, lastFailureAt: AT });
    expect(archiveRow(envelope, {}, null)).toMatchObject({ reason: 'unknown', payloadJson: null, tenantId: null });
  });

  const dlqRecord = (timestamp: string) => ({ offset: '9', key: null, value: Buffer.from([0, 1, 2]), timestamp, headers: { a: Buffer.from('b') }, attributes: 0 }) as never;

  it('archives an undecodable DLQ record as itself: its own coordinates and raw bytes', () => {
    const row = rawRecordRow('sluice.runs.dlq', 1, dlqRecord(String(AT)), 'sluice.dlq-sink', RAW_ROW_REASON.undecodable, new Error('unknown schema id'), AT + 1);
    expect(row).toMatchObject({ originalTopic: 'sluice.runs.dlq', originalPartition: 1, originalOffset: '9', reason: 'undecodable_dead_letter', headers: { a: 'b' }, failedAt: AT, attempts: 0, errorMessage: 'unknown schema id' });
    expect([...row.payload]).toEqual([0, 1, 2]);
  });

  it('archives a record whose row Postgres refused the same way, with the refusal as its error', () => {
    const refusal = new Error('SQLSTATE 22P02: invalid input syntax for type uuid: "not-a-uuid"');
    refusal.name = 'PostgresRejectedError';
    const row = rawRecordRow('sluice.runs.dlq', 2, dlqRecord(String(AT)), 'sluice.dlq-sink', RAW_ROW_REASON.unarchivable, refusal, AT + 1);
    expect(row).toMatchObject({ originalTopic: 'sluice.runs.dlq', originalPartition: 2, originalOffset: '9', reason: 'unarchivable', runId: null, tenantId: null, payloadJson: null });
    expect(row).toMatchObject({ errorClass: 'PostgresRejectedError', errorMessage: refusal.message });
  });

  it.each([['-1'], ['not a number'], ['1e16'], ['-8640000000000000'], ['Infinity']])('a record time Postgres cannot store (%s) becomes the archive time', (timestamp) => {
    const row = rawRecordRow('sluice.runs.dlq', 0, dlqRecord(timestamp), 'g', RAW_ROW_REASON.unarchivable, new Error('x'), AT + 1);
    expect([row.firstFailedAt, row.failedAt]).toEqual([AT + 1, AT + 1]);
  });
});

describe('decodeDeadLetter', () => {
  const topics = topicNames('ns.');
  const envelope = { payload: Buffer.from('original'), originalTopic: topics.batch } as DeadLetterEnvelope;
  const run = { runId: 'r1' } as RunRequested;
  /** A codec whose answers per subject the test scripts: a value, or an error to throw. */
  const codec = (answers: Record<string, unknown>) => ({
    decode: async <T>(_buf: Buffer | null, subject: string): Promise<T> => {
      const answer = answers[subject];
      if (answer instanceof Error) throw answer;
      return answer as T;
    },
  });
  const message = { value: Buffer.from('record') };
  const registryDown = new SchemaRegistryError('schema registry GET http://registry/schemas/ids/7 timed out', true);

  it('gives the envelope and its run when both decode', async () => {
    await expect(decodeDeadLetter(codec({ [SUBJECTS.deadLetter]: envelope, [SUBJECTS.runRequested]: run }), message, topics)).resolves.toEqual({ envelope, run });
  });

  it.each(['interactive', 'retry'] as const)('decodes a run read from the %s topic too', async (kind) => {
    const from = { ...envelope, originalTopic: topics[kind] };
    await expect(decodeDeadLetter(codec({ [SUBJECTS.deadLetter]: from, [SUBJECTS.runRequested]: run }), message, topics)).resolves.toEqual({ envelope: from, run });
  });

  it.each([
    ['the ingress topic, which producers write', 'ns.sluice.runs.requests'],
    ['the status topic', 'ns.sluice.runs.status'],
    ['another namespace’s work topic', 'other.sluice.runs.batch'],
    ['a topic outside Sluice', 'payments.ledger'],
  ])('never takes the payload for a run when it was read from %s, even when it decodes as one', async (_, originalTopic) => {
    const forged = { ...envelope, originalTopic };
    const asked: string[] = [];
    const recording = {
      decode: async <T>(buf: Buffer | null, subject: string): Promise<T> => {
        asked.push(subject);
        return codec({ [SUBJECTS.deadLetter]: forged, [SUBJECTS.runRequested]: run }).decode<T>(buf, subject);
      },
    };
    await expect(decodeDeadLetter(recording, message, topics)).resolves.toEqual({ envelope: forged, run: null });
    expect(asked).toEqual([SUBJECTS.deadLetter]);
  });

  it('gives the envelope without a run when the original bytes are poison', async () => {
    const poison = new EventDecodeError('bad_magic', 'first byte is 112');
    await expect(decodeDeadLetter(codec({ [SUBJECTS.deadLetter]: envelope, [SUBJECTS.runRequested]: poison }), message, topics)).resolves.toEqual({ envelope, run: null });
  });

  it('calls a record that can never decode undecodable', async () => {
    const bad = new EventDecodeError('unknown_schema', 'schema id 9 is not registered', 9);
    await expect(decodeDeadLetter(codec({ [SUBJECTS.deadLetter]: bad }), message, topics)).resolves.toEqual({ undecodable: bad });
  });

  it('rejects while the schema registry cannot answer, for the envelope or for its run, so the batch is tried again', async () => {
    await expect(decodeDeadLetter(codec({ [SUBJECTS.deadLetter]: registryDown }), message, topics)).rejects.toBe(registryDown);
    await expect(decodeDeadLetter(codec({ [SUBJECTS.deadLetter]: envelope, [SUBJECTS.runRequested]: registryDown }), message, topics)).rejects.toBe(registryDown);
  });
});
