import type { KafkaMessage } from 'kafkajs';
import type { EventDecodeError } from '../events/codec.js';
import type { DeadLetterEnvelope } from '../events/schemas.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';

/** Failure context as Kafka headers, in the spirit of Spring Kafka's `kafka_dlt-*` headers. */
export const DLQ_HEADER = {
  originalTopic: 'sluice-dlt-original-topic',
  originalPartition: 'sluice-dlt-original-partition',
  originalOffset: 'sluice-dlt-original-offset',
  consumerGroup: 'sluice-dlt-original-consumer-group',
  reason: 'sluice-dlt-reason',
  errorClass: 'sluice-dlt-exception-fqcn',
  errorMessage: 'sluice-dlt-exception-message',
  attempts: 'sluice-dlt-attempts',
  firstFailureAt: 'sluice-dlt-first-failure-at',
  lastFailureAt: 'sluice-dlt-last-failure-at',
  tenant: 'sluice-dlt-tenant',
  runId: 'sluice-dlt-run-id',
} as const;

/**
 * Every `sluice-dlt-reason` Sluice writes. The header of a record on the DLQ topic is data, not
 * config (anyone who can produce to the topic writes it), so metric labels take it only from here.
 */
export const DEAD_LETTER_REASONS = [
  'decode_error',
  'non_retryable',
  'dependency_unavailable',
  'invalid_input',
  'unknown_tenant',
  'unknown_workflow',
  'infrastructure_error',
  'expired',
  'postgres_rejected',
  'undecodable_dead_letter',
  'unarchivable',
  'unauthenticated',
  'invalid_request',
  'idempotency_key_reused',
] as const;
export type DeadLetterReason = (typeof DEAD_LETTER_REASONS)[number];

const KNOWN_REASONS = new Set<string>(DEAD_LETTER_REASONS);

/** A reason as a metric label: one of Sluice's own, else `other`. */
export function reasonLabel(reason: string): DeadLetterReason | 'other' {
  return KNOWN_REASONS.has(reason) ? (reason as DeadLetterReason) : 'other';
}

const MAX_MESSAGE = 1_000;
const MAX_STACK = 4_000;

export interface DeadLetterInput {
  topic: string;
  partition: number;
  message: Pick<KafkaMessage, 'offset' | 'key' | 'value'>;
  consumerGroup: string;
  /** Short machine-readable cause, e.g. `decode_error`. */
  reason: DeadLetterReason;
  error: Error;
  attempts: number;
  firstFailureAt: number;
  lastFailureAt: number;
  run?: { runId: string; tenantId: string; workflow: string };
}

/** Where an event dies: the original bytes, untouched, plus everything needed to judge and replay it. */
export function buildDeadLetter(input: DeadLetterInput): { envelope: DeadLetterEnvelope; headers: Record<string, string> } {
  const { error, run } = input;
  const message = error.message.slice(0, MAX_MESSAGE);
  const envelope: DeadLetterEnvelope = {
    runId: run?.runId ?? null,
    tenantId: run?.tenantId ?? null,
    workflow: run?.workflow ?? null,
    originalTopic: input.topic,
    originalPartition: input.partition,
    originalOffset: input.message.offset,
    originalKey: input.message.key ?? null,
    payload: input.message.value ?? Buffer.alloc(0),
    errorClass: error.name,
    errorMessage: message,
    errorStack: error.stack ? error.stack.slice(0, MAX_STACK) : null,
    attempts: input.attempts,
    firstFailureAt: input.firstFailureAt,
    lastFailureAt: input.lastFailureAt,
    consumerGroup: input.consumerGroup,
  };
  const headers: Record<string, string> = {
    [DLQ_HEADER.originalTopic]: input.topic,
    [DLQ_HEADER.originalPartition]: String(input.partition),
    [DLQ_HEADER.originalOffset]: input.message.offset,
    [DLQ_HEADER.consumerGroup]: input.consumerGroup,
    [DLQ_HEADER.reason]: input.reason,
    [DLQ_HEADER.errorClass]: error.name,
    [DLQ_HEADER.errorMessage]: message,
    [DLQ_HEADER.attempts]: String(input.attempts),
    [DLQ_HEADER.firstFailureAt]: new Date(input.firstFailureAt).toISOString(),
    [DLQ_HEADER.lastFailureAt]: new Date(input.lastFailureAt).toISOString(),
    ...(run ? { [DLQ_HEADER.tenant]: run.tenantId, [DLQ_HEADER.runId]: run.runId } : {}),
  };
  return { envelope, headers };
}

export interface DeadLetterSink {
  publishDeadLetter(envelope: DeadLetterEnvelope, headers: Record<string, string>, timeoutMs: number): Promise<void>;
}

/** A record that will never decode, where it was read. */
export interface PoisonRecord {
  topic: string;
  partition: number;
  message: Pick<KafkaMessage, 'offset' | 'key' | 'value'>;
}

/**
 * A record that cannot be decoded will never decode on redelivery: park it in the DLQ with its
 * bytes so the partition keeps flowing. Resolves only once the DLQ produce is acknowledged, so the
 * caller may then move past the record's offset.
 */
export async function deadLetterPoison(
  sink: DeadLetterSink,
  record: PoisonRecord,
  consumerGroup: string,
  error: Error,
  timeoutMs: number,
  now: number = Date.now(),
): Promise<void> {
  const { envelope, headers } = buildDeadLetter({ ...record, consumerGroup, reason: 'decode_error', error, attempts: 1, firstFailureAt: now, lastFailureAt: now });
  await sink.publishDeadLetter(envelope, headers, timeoutMs);
}

/** How a consumer parks the records it cannot decode. */
export interface PoisonRoute {
  deadLetters: DeadLetterSink;
  consumerGroup: string;
  timeoutMs: number;
  metrics: Pick<Metrics, 'deadLettered'>;
  log: Logger;
  /** Logged (warn) with the record's coordinates and why it does not decode. */
  logMessage: string;
}

/** Logs, dead-letters and counts a poison record; resolves once the DLQ acknowledged it. */
export async function routePoison(route: PoisonRoute, record: PoisonRecord, error: EventDecodeError): Promise<void> {
  const { topic, partition, message } = record;
  route.log.warn({ topic, partition, offset: message.offset, reason: error.reason }, route.logMessage);
  await deadLetterPoison(route.deadLetters, record, route.consumerGroup, error, route.timeoutMs);
  route.metrics.deadLettered.inc({ topic, reason: 'decode_error' });
}
