import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { REPLACEMENT_CHARACTER as R, storableJsonText, storableText } from '../../src/db/storable-text.js';
import { DeadLetterStore } from '../../src/dlq/dead-letter-store.js';
import type { RunStatusChanged } from '../../src/events/schemas.js';
import { RunStore } from '../../src/status/run-store.js';
import { openMigratedSchema, type MigratedSchema } from '../support/migrated-schema.js';

/** Text Postgres refuses, made storable, against the real server: what it accepts is the judge. */
let db: MigratedSchema;
let pool: pg.Pool;

beforeAll(async () => {
  db = await openMigratedSchema(inject('infra').databaseUrl, 'storable');
  pool = db.pool;
});

afterAll(async () => {
  await db?.close();
});

const HIGH = '\ud83d';
const LOW = '\ude00';

/** Every string of length 0..3 over the characters that trouble Postgres and JSON escapes. */
function troublesomeStrings(): string[] {
  const alphabet = ['\u0000', '\\', '"', 'u', '0', HIGH, LOW, 'a', R];
  const all = [''];
  for (let length = 1, layer = ['']; length <= 3; length++) {
    layer = layer.flatMap((s) => alphabet.map((c) => s + c));
    all.push(...layer);
  }
  return all;
}

describe('storable text against Postgres', () => {
  it('every troublesome string is refused as it is, and stored as text and jsonb once made storable', async () => {
    const strings = troublesomeStrings();
    await expect(pool.query('SELECT $1::text', ['a\u0000'])).rejects.toMatchObject({ code: '22021' });
    await expect(pool.query('SELECT $1::jsonb', [JSON.stringify({ m: 'a\u0000' })])).rejects.toMatchObject({ code: '22P05' });
    await expect(pool.query('SELECT $1::jsonb', [JSON.stringify({ m: `a${HIGH}` })])).rejects.toMatchObject({ code: '22P02' });

    const texts = strings.map(storableText);
    const docs = strings.map((s) => storableJsonText(JSON.stringify({ [s]: [s] })));
    const { rows } = await pool.query<{ t: string; j: Record<string, string[]> }>('SELECT t, j FROM unnest($1::text[], $2::jsonb[]) AS u(t, j)', [texts, docs]);
    expect(rows).toHaveLength(strings.length);
    const wrong = strings.filter((s, i) => rows[i]!.t !== storableText(s) || JSON.stringify(rows[i]!.j) !== JSON.stringify({ [storableText(s)]: [storableText(s)] }));
    expect(wrong.map((s) => JSON.stringify(s))).toEqual([]);
  });

  it('a run whose admission, events, result and error carry NUL and lone surrogates is stored and reads back', async () => {
    const runs = new RunStore(pool);
    const runId = randomUUID();
    const admittedAt = Date.now();
    await runs.recordAdmission({ runId, tenantId: 'tenant-a', workflow: 'support-reply', class: 'interactive', admittedAt, deadline: admittedAt + 30_000, message: 'queued \u0000' });
    const event = (over: Partial<RunStatusChanged>): RunStatusChanged => ({
      runId,
      tenantId: 'tenant-a',
      workflow: 'support-reply',
      class: 'interactive',
      admittedAt,
      deadline: admittedAt + 30_000,
      attempt: 1,
      traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      sequence: 1,
      status: 'running',
      occurredAt: admittedAt + 10,
      message: 'running',
      step: null,
      result: null,
      error: null,
      attemptStartedAt: admittedAt + 5,
      ...over,
    });
    await runs.applyStatusEvents([
      event({ sequence: 1, status: 'waiting_dependency', step: 'lookup\u0000', message: `order-lookup failed (cut ${HIGH})` }),
      event({ sequence: 2, status: 'failed', occurredAt: admittedAt + 20, message: 'failed \u0000', error: { code: 'tool\u0000', message: `HTTP 400 ${LOW}\u0000`, retryable: false } }),
      event({ sequence: 3, status: 'completed', occurredAt: admittedAt + 30, message: 'completed', result: JSON.stringify({ orderId: '4\u00002', text: `Simulated reply ${HIGH}`, ['k\u0000']: '\\u0000 stays' }) }),
    ]);
    const view = await runs.getRun(runId, 'tenant-a');
    expect(view).toMatchObject({ status: 'completed', statusMessage: 'completed', result: { orderId: `4${R}2`, text: `Simulated reply ${R}`, [`k${R}`]: '\\u0000 stays' } });
    const events = await runs.listEvents(runId, 'tenant-a', -1, 10);
    expect(events.map((e) => [e.sequence, e.message, e.step])).toEqual([
      [0, `queued ${R}`, null],
      [1, `order-lookup failed (cut ${R})`, `lookup${R}`],
      [2, `failed ${R}`, null],
      [3, 'completed', null],
    ]);
    expect(events[2]!.error).toEqual({ code: `tool${R}`, message: `HTTP 400 ${R}${R}`, retryable: false });
  });

  it('a dead letter whose headers, error, stack and decoded run carry NUL and lone surrogates is archived', async () => {
    const store = new DeadLetterStore(pool, { namespace: 'storable' });
    const row = {
      originalTopic: 'sluice.runs.interactive',
      originalPartition: 0,
      originalOffset: '7',
      originalKey: Buffer.from('tenant\u0000a'),
      consumerGroup: 'sluice.processor',
      tenantId: 'tenant\u0000a',
      workflow: `support${HIGH}`,
      runId: randomUUID(),
      reason: 'non_retryable',
      payload: Buffer.from([0, 1, 2, 0]),
      payloadJson: { runId: 'r', input: JSON.stringify({ message: 'hi \u0000' }), raw: 'a\u0000b' },
      headers: { 'sluice-dlt-exception-message': `bad \u0000 ${LOW}`, ['x\u0000']: 'y' },
      errorClass: 'ToolHttpError\u0000',
      errorMessage: `order-lookup: HTTP 400 ${HIGH}\u0000`,
      errorStack: 'Error\u0000\n    at x',
      attempts: 1,
      firstFailedAt: Date.now(),
      failedAt: Date.now(),
    };
    expect(await store.archive([row])).toHaveLength(1);
    const [summary] = await store.list({ reason: 'non_retryable' });
    const stored = (await store.get(summary!.id))!;
    expect(stored).toMatchObject({
      tenantId: `tenant${R}a`,
      workflow: `support${R}`,
      errorClass: `ToolHttpError${R}`,
      errorMessage: `order-lookup: HTTP 400 ${R}${R}`,
      errorStack: `Error${R}\n    at x`,
      headers: { 'sluice-dlt-exception-message': `bad ${R} ${R}`, [`x${R}`]: 'y' },
      payloadJson: { runId: 'r', input: '{"message":"hi \\u0000"}', raw: `a${R}b` },
    });
    // The bytes are never touched: they are what a replay sends.
    expect([...stored.payload]).toEqual([0, 1, 2, 0]);
    expect(stored.originalKey!.toString()).toBe('tenant\u0000a');
  });
});
