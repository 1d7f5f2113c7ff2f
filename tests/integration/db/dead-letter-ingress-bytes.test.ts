import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { packageRoot } from '../../../src/util/package-root.js';
import { openMigratedSchema, type MigratedSchema } from '../../support/migrated-schema.js';

const MIGRATION = '006_dead_letter_ingress_bytes.sql';

/** Rows archived before the DLQ sink stopped decoding ingress records as runs lose the decoded run. */
describe(`migration ${MIGRATION}`, () => {
  let db: MigratedSchema;

  beforeAll(async () => {
    db = await openMigratedSchema(inject('infra').databaseUrl, 'dlq_ingress_bytes', 1);
  });
  afterAll(() => db?.close());

  const insert = async (namespace: string, originalTopic: string, offset: number): Promise<string> => {
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO dead_letter_events (namespace, original_topic, original_partition, original_offset, consumer_group, reason, payload, payload_json,
                                       headers, error_class, error_message, attempts, first_failed_at, failed_at)
       VALUES ($1, $2, 0, $3, 'g', 'unauthenticated', '\\x00'::bytea, '{"runId":"forged","tenantId":"tenant-b"}', '{}', 'Error', 'x', 1, now(), now())
       RETURNING id::text`,
      [namespace, originalTopic, offset],
    );
    return rows[0]!.id;
  };
  const decoded = async (id: string) => (await db.pool.query<{ payload_json: unknown }>('SELECT payload_json FROM dead_letter_events WHERE id = $1', [id])).rows[0]!.payload_json;

  it('clears the decoded run of every namespace’s ingress rows and of no other row, and can run again', async () => {
    const ingress = await insert('ns.', 'ns.sluice.runs.requests', 1);
    const unprefixed = await insert('', 'sluice.runs.requests', 2);
    const work = await insert('ns.', 'ns.sluice.runs.batch', 3);
    // Another namespace's ingress topic seen from this one's rows: not this namespace's ingress.
    const foreign = await insert('ns.', 'other.sluice.runs.requests', 4);
    const sql = readFileSync(join(packageRoot(), 'migrations', MIGRATION), 'utf8');
    await db.pool.query(sql);
    await db.pool.query(sql);
    expect(await decoded(ingress)).toBeNull();
    expect(await decoded(unprefixed)).toBeNull();
    expect(await decoded(work)).toEqual({ runId: 'forged', tenantId: 'tenant-b' });
    expect(await decoded(foreign)).toEqual({ runId: 'forged', tenantId: 'tenant-b' });
  });
});
