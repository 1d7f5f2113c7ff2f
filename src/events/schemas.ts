import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../util/package-root.js';
import { canonicalJson } from '../util/canonical-json.js';
import avro from 'avsc';
import type { Type } from 'avsc';

/**
 * Event schemas and their TypeScript shapes. The .avsc files in `schemas/` are the source of
 * truth; the interfaces below mirror them (a unit test keeps the enums in step).
 *
 * Timestamps are `long` with the `timestamp-millis` annotation. No logical type is registered
 * with avsc, so they decode to plain epoch-millisecond numbers while registries and ecosystem
 * tools still see them as timestamps. Nullable unions decode unwrapped (`string | null`).
 */

export const RUN_CLASSES = ['interactive', 'batch'] as const;
export type RunClass = (typeof RUN_CLASSES)[number];

export const RUN_STATUSES = [
  'queued',
  'running',
  'waiting_dependency',
  'completed',
  'failed',
  'expired',
  'cancelled',
  'dead_lettered',
  'deferred',
  'rejected',
] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

export interface RunError {
  code: string;
  message: string;
  retryable: boolean;
}

/** Fields every run event carries. */
export interface RunEventBase {
  runId: string;
  tenantId: string;
  workflow: string;
  class: RunClass;
  /** Epoch milliseconds. */
  admittedAt: number;
  /** Epoch milliseconds. */
  deadline: number;
  /** From 1. */
  attempt: number;
  traceparent: string;
}

export interface RunRequested extends RunEventBase {
  /** The caller's input as JSON text. */
  input: string;
  idempotencyKey: string | null;
  /** Epoch milliseconds; null means the attempt may start immediately. */
  dueAt: number | null;
  /** Tokens taken from the tenant's token budget at admission; absent or null when none were. */
  tokenReservation?: number | null;
  /** Provider request turns reserved at admission for the first attempt's calls (schema v3); absent or null when none were. */
  prepaidTurns?: PrepaidTurns[] | null;
}

/** A run's reserved request turns on one dependency: `calls` of them, none to go before `notBefore` (epoch ms). */
export interface PrepaidTurns {
  dependency: string;
  calls: number;
  notBefore: number;
}

export interface RunStatusChanged extends RunEventBase {
  sequence: number;
  status: RunStatus;
  /** Epoch milliseconds. */
  occurredAt: number;
  message: string;
  step: string | null;
  /** JSON text. */
  result: string | null;
  error: RunError | null;
  /** Epoch milliseconds; null before the attempt started (added in schema v2: old writers omit it). */
  attemptStartedAt: number | null;
  /** The producer's request id, on the statuses the ingress publishes (schema v3; absent or null otherwise). */
  requestId?: string | null;
  /** Deferred: seconds until the ingress offers the request again; rejected: the contract's retryAfterSec (schema v3). */
  retryAfterSec?: number | null;
}

/** A producer's run request on the ingress topic, before admission gave it a run id and a deadline. */
export interface RunSubmission {
  requestId: string;
  idempotencyKey: string;
  tenantId: string;
  workflow: string;
  /** The input as JSON text. */
  input: string;
  class: RunClass | null;
  deadlineMs: number | null;
}

export interface DeadLetterEnvelope {
  runId: string | null;
  tenantId: string | null;
  workflow: string | null;
  originalTopic: string;
  originalPartition: number;
  originalOffset: string;
  originalKey: Buffer | null;
  payload: Buffer;
  errorClass: string;
  errorMessage: string;
  errorStack: string | null;
  attempts: number;
  /** Epoch milliseconds. */
  firstFailureAt: number;
  /** Epoch milliseconds. */
  lastFailureAt: number;
  consumerGroup: string;
}

/** Registry subjects, named after the record's full name (RecordNameStrategy). */
export const SUBJECTS = {
  runRequested: 'dev.sluice.events.RunRequested',
  runStatusChanged: 'dev.sluice.events.RunStatusChanged',
  deadLetter: 'dev.sluice.events.DeadLetter',
  runSubmission: 'dev.sluice.events.RunSubmission',
} as const;
export type EventSubject = (typeof SUBJECTS)[keyof typeof SUBJECTS];

export interface EventBySubject {
  'dev.sluice.events.RunRequested': RunRequested;
  'dev.sluice.events.RunStatusChanged': RunStatusChanged;
  'dev.sluice.events.DeadLetter': DeadLetterEnvelope;
  'dev.sluice.events.RunSubmission': RunSubmission;
}

export interface EventSchema {
  subject: string;
  type: Type;
  /** Canonical JSON text, as registered with a schema registry. */
  canonical: string;
}

/** Parses Avro schema JSON text into an avsc Type; every schema in Sluice goes through here. */
export function parseSchema(schemaJson: string): Type {
  let parsed: unknown;
  try {
    parsed = JSON.parse(schemaJson);
  } catch (err) {
    throw new Error(`schema is not valid JSON: ${(err as Error).message}`, { cause: err });
  }
  try {
    return avro.Type.forSchema(parsed as avro.Schema);
  } catch (err) {
    throw new Error(`invalid Avro schema: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * Canonical text of a schema: compact JSON with object keys sorted, after checking it is a valid
 * Avro schema. Unlike Parsing Canonical Form it keeps docs, defaults and logical types, so the
 * text a registry stores under an id is exactly what was registered; it is also independent of
 * the avsc version, which keeps derived ids stable across upgrades.
 */
export function canonicalSchemaJson(schemaJson: string): string {
  parseSchema(schemaJson);
  return canonicalJson(JSON.parse(schemaJson));
}

/** A reader/writer schema for the codec; its subject is the record's full name. */
export function eventSchema(schemaJson: string): EventSchema {
  const type = parseSchema(schemaJson);
  if (type.name === undefined || !avro.Type.isType(type, 'record')) {
    throw new Error('an event schema must be a named record');
  }
  return { subject: type.name, type, canonical: canonicalSchemaJson(schemaJson) };
}


const SCHEMA_FILES = ['RunRequested.avsc', 'RunStatusChanged.avsc', 'DeadLetter.avsc', 'RunSubmission.avsc'] as const;

let loaded: ReadonlyMap<string, EventSchema> | undefined;

/** The bundled event schemas keyed by subject; read from `schemas/` once per process. */
export function loadEventSchemas(): ReadonlyMap<string, EventSchema> {
  if (loaded) return loaded;
  const dir = join(packageRoot(), 'schemas');
  const schemas = new Map<string, EventSchema>();
  for (const file of SCHEMA_FILES) {
    const path = join(dir, file);
    const text = readFileSync(path, 'utf8');
    let schema: EventSchema;
    try {
      schema = eventSchema(text);
    } catch (err) {
      throw new Error(`${path}: ${(err as Error).message}`, { cause: err });
    }
    schemas.set(schema.subject, schema);
  }
  loaded = schemas;
  return schemas;
}
