import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import { DeadLetterStore, MAX_LIST_LIMIT, type ArchivedDeadLetter, type DeadLetterRow } from '../../src/dlq/dead-letter-store.js';

const HOUR = 3_600_000;
const T0 = Date.UTC(2026, 2, 1, 10, 30, 0);

/** A schema of its own: rows of other files (and earlier runs) never show up in these counts. */
const schema = `dlq_store_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
let admin: pg.Pool;
let pool: pg.Pool;
let store: DeadLetterStore;

beforeAll(async () => {
  const { databaseUrl } = inject('infra');
  admin = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  await admin.query(`CREATE SCHEMA ${schema}`);
  pool = new pg.Pool({ connectionString: databaseUrl, options: `-c search_path=${schema}`, max: 10 });
  await migrate(pool);
  store = new DeadLetterStore(pool, { statementTimeoutMs: 2_000 });
});

afterAll(async () => {
  await pool?.end();
  await admin?.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await admin?.end();
});

let offset = 0;
/** Each call is a different original record (fresh offset) unless told otherwise. */
function letter(over: Partial<ArchivedDeadLetter> = {}): ArchivedDeadLetter {
  offset++;
  return {
    originalTopic: 'store.sluice.runs.interactive',
    originalPartition: 1,
    originalOffset: String(offset),
    originalKey: Buffer.from('tenant-a'),
    consumerGroup: 'store.sluice.processor',
    tenantId: 'tenant-a',
    workflow: 'support-reply',
    runId: randomUUID(),
    reason: 'non_retryable',
    payload: Buffer.from([0, 0, 0, 0, 1, offset % 256]),
    payloadJson: { runId: 'r', attempt: 1 },
    headers: { 'sluice-dlt-reason': over.reason ?? 'non_retryable' },
    errorClass: 'ToolHttpError',
    errorMessage: 'order-lookup answered 400',
    errorStack: 'ToolHttpError: order-lookup answered 400\n    at step (run-executor.ts:1:1)',
    attempts: 3,
    firstFailedAt: T0 - 60_000,
    failedAt: T0,
    ...over,
  };
}

/** Archives one record and reads it back as stored. */
async function archiveOne(over: Partial<ArchivedDeadLetter> = {}): Promise<DeadLetterRow> {
  const row = letter(over);
  await store.archive([row]);
  const { rows } = await pool.query<{ id: string }>('SELECT id::text AS id FROM dead_letter_events WHERE original_topic = $1 AND original_partition = $2 AND original_offset = $3', [
    row.originalTopic,
    row.originalPartition,
    row.originalOffset,
  ]);
  return (await store.get(rows[0]!.id))!;
}

describe('DeadLetterStore.archive', () => {
  it('stores a record delivered twice once, also within one batch', async () => {
    const topic = `idem-${randomBytes(3).toString('hex')}`;
    const a = letter({ originalTopic: topic });
    const b = letter({ originalTopic: topic });
    expect(await store.archive([a, b])).toHaveLength(2);
    expect(await store.archive([a, b])).toEqual([]);
    const c = letter({ originalTopic: topic });
    // Reported new once, so the sink counts it and reports it dead_lettered once.
    expect(await store.archive([c, { ...c, errorMessage: 'the second copy' }])).toEqual([c]);
    const { rows } = await pool.query<{ original_offset: string; error_message: string }>('SELECT original_offset::text, error_message FROM dead_letter_events WHERE original_topic = $1 ORDER BY original_offset', [topic]);
    expect(rows.map((r) => r.original_offset)).toEqual([a.originalOffset, b.originalOffset, c.originalOffset]);
    expect(rows[2]!.error_message).toBe('order-lookup answered 400');
  });
});

describe('DeadLetterStore.list and get', () => {
  it('filters by tenant, workflow, reason, status, time and ids, newest first, bounded by the limit', async () => {
    const tenant = `list-${randomBytes(3).toString('hex')}`;
    const rows = [
      letter({ tenantId: tenant, workflow: 'w1', reason: 'decode_error', failedAt: T0 - 3 * HOUR }),
      letter({ tenantId: tenant, workflow: 'w1', reason: 'non_retryable', failedAt: T0 - 2 * HOUR }),
      letter({ tenantId: tenant, workflow: 'w2', reason: 'non_retryable', failedAt: T0 - HOUR }),
      letter({ tenantId: tenant, workflow: 'w2', reason: 'dependency_unavailable', failedAt: T0 }),
    ];
    await store.archive(rows);
    const all = await store.list({ tenant });
    expect(all.map((r) => r.failedAt.getTime())).toEqual([T0, T0 - HOUR, T0 - 2 * HOUR, T0 - 3 * HOUR]);
    expect(all.every((r) => r.status === 'pending' && r.tenantId === tenant && r.replayCount === 0)).toBe(true);
    expect(all[0]).toMatchObject({ workflow: 'w2', reason: 'dependency_unavailable', errorClass: 'ToolHttpError', attempts: 3, originalTopic: 'store.sluice.runs.interactive', runId: rows[3]!.runId });

    expect((await store.list({ tenant, workflow: 'w1' })).map((r) => r.reason)).toEqual(['non_retryable', 'decode_error']);
    expect((await store.list({ tenant, reason: 'non_retryable' })).map((r) => r.workflow)).toEqual(['w2', 'w1']);
    expect((await store.list({ tenant, since: new Date(T0 - 2 * HOUR), until: new Date(T0) })).map((r) => r.failedAt.getTime())).toEqual([T0 - HOUR, T0 - 2 * HOUR]);
    expect(await store.list({ tenant, limit: 2 })).toEqual(all.slice(0, 2));
    expect(await store.list({ ids: [all[1]!.id, all[3]!.id, '999999999'] })).toEqual([all[1], all[3]]);
    expect(await store.list({ tenant, status: 'replayed' })).toEqual([]);
    expect(await store.list({ tenant: 'no-such-tenant' })).toEqual([]);
    await expect(store.list({ limit: 0 })).rejects.toThrow(RangeError);
    await expect(store.list({ limit: MAX_LIST_LIMIT + 1 })).rejects.toThrow(RangeError);
  });

  it('gets every field back, the payload byte for byte', async () => {
    const raw = Buffer.from([0x00, 0xff, 0xfe, 0x00, 0x2a, 0xc3, 0x28]);
    const archived = letter({ tenantId: `get-${randomBytes(3).toString('hex')}`, payload: raw, payloadJson: null, originalKey: null, errorStack: null, reason: 'decode_error' });
    await store.archive([archived]);
    const [summary] = await store.list({ tenant: archived.tenantId! });
    const row = await store.get(summary!.id);
    expect(row).toMatchObject({
      ...summary,
      originalTopic: archived.originalTopic,
      originalPartition: 1,
      originalOffset: archived.originalOffset,
      originalKey: null,
      consumerGroup: archived.consumerGroup,
      payloadJson: null,
      headers: { 'sluice-dlt-reason': 'decode_error' },
      errorStack: null,
      firstFailedAt: new Date(archived.firstFailedAt),
      replayedAt: null,
      replayedBy: null,
      discardedAt: null,
      discardedBy: null,
      discardReason: null,
    });
    expect(Buffer.compare(row!.payload, raw)).toBe(0);
    expect(row!.archivedAt).toBeInstanceOf(Date);
    expect(await store.get('999999999')).toBeUndefined();
  });
});

describe('DeadLetterStore.discard', () => {
  it('discards pending rows only and says why the others were not', async () => {
    const pending = await archiveOne();
    const replayed = await archiveOne();
    expect((await store.replayOne(replayed.id, 'op', async () => undefined)).result).toBe('replayed');
    const result = await store.discard([pending.id, replayed.id, '999999999', pending.id], 'alice@ops', 'customer cancelled the order');
    expect(result).toEqual({ discarded: [pending.id], notFound: ['999999999'], notPending: [{ id: replayed.id, status: 'replayed' }] });
    expect(await store.get(pending.id)).toMatchObject({ status: 'discarded', discardedBy: 'alice@ops', discardReason: 'customer cancelled the order' });
    expect((await store.get(pending.id))!.discardedAt).toBeInstanceOf(Date);
    expect(await store.discard([pending.id], 'bob', 'again')).toEqual({ discarded: [], notFound: [], notPending: [{ id: pending.id, status: 'discarded' }] });
    await expect(store.discard([pending.id], 'bob', '  ')).rejects.toThrow(/reason/);
  });
});

describe('DeadLetterStore.replayOne', () => {
  it('runs the produce once when two replays race for the same row', async () => {
    const row = await archiveOne();
    let calls = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const first = store.replayOne(row.id, 'first', async (r) => {
      calls++;
      await gate;
      return r.id;
    });
    // The first replay now holds the row lock inside its produce.
    await expect.poll(() => calls).toBe(1);
    const second = await store.replayOne(row.id, 'second', async () => void calls++);
    expect(second).toEqual({ id: row.id, result: 'skipped', why: 'locked' });
    release();
    expect(await first).toEqual({ id: row.id, result: 'replayed', value: row.id });
    expect(await store.replayOne(row.id, 'third', async () => void calls++)).toEqual({ id: row.id, result: 'skipped', why: 'replayed' });
    expect(calls).toBe(1);
    const after = (await store.get(row.id))!;
    expect(after).toMatchObject({ status: 'replayed', replayedBy: 'first', replayCount: 1 });
    expect(after.replayedAt).toBeInstanceOf(Date);
  });

  it('produces once among many simultaneous replays', async () => {
    const row = await archiveOne();
    let calls = 0;
    const outcomes = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        store.replayOne(row.id, `r${i}`, async () => {
          calls++;
          await new Promise((r) => setTimeout(r, 100));
        }),
      ),
    );
    expect(calls).toBe(1);
    expect(outcomes.filter((o) => o.result === 'replayed')).toHaveLength(1);
    expect(outcomes.filter((o) => o.result === 'skipped')).toHaveLength(5);
  });

  it('leaves the row pending when the produce fails, so a later replay can take it', async () => {
    const row = await archiveOne();
    const failed = await store.replayOne(row.id, 'op', async () => {
      throw new Error('broker unreachable');
    });
    expect(failed).toMatchObject({ id: row.id, result: 'failed', error: { message: 'broker unreachable' } });
    expect(await store.get(row.id)).toMatchObject({ status: 'pending', replayCount: 0, replayedAt: null, replayedBy: null });
    expect((await store.replayOne(row.id, 'op', async (r) => r.payload.length)).result).toBe('replayed');
  });

  it('hands the produce the whole row, and skips what is not there or discarded', async () => {
    const row = await archiveOne();
    let seen: DeadLetterRow | undefined;
    await store.replayOne(row.id, 'op', async (r) => void (seen = r));
    expect(seen).toEqual(row);
    expect(await store.replayOne('999999999', 'op', async () => undefined)).toEqual({ id: '999999999', result: 'skipped', why: 'not_found' });
    const gone = await archiveOne();
    await store.discard([gone.id], 'op', 'obsolete');
    expect(await store.replayOne(gone.id, 'op', async () => undefined)).toEqual({ id: gone.id, result: 'skipped', why: 'discarded' });
  });
});

describe('DeadLetterStore.purge', () => {
  it('deletes only replayed and discarded rows handled before the cut-off', async () => {
    const oldReplayed = await archiveOne();
    const oldDiscarded = await archiveOne();
    const recentReplayed = await archiveOne();
    const oldPending = await archiveOne({ failedAt: T0 - 400 * 24 * HOUR });
    await store.replayOne(oldReplayed.id, 'op', async () => undefined);
    await store.replayOne(recentReplayed.id, 'op', async () => undefined);
    await store.discard([oldDiscarded.id], 'op', 'obsolete');
    await pool.query(`UPDATE dead_letter_events SET replayed_at = now() - interval '31 days' WHERE id = $1`, [oldReplayed.id]);
    await pool.query(`UPDATE dead_letter_events SET discarded_at = now() - interval '31 days' WHERE id = $1`, [oldDiscarded.id]);
    const cutoff = new Date(Date.now() - 30 * 24 * HOUR);
    expect(await store.purge(cutoff)).toBe(2);
    expect(await store.get(oldReplayed.id)).toBeUndefined();
    expect(await store.get(oldDiscarded.id)).toBeUndefined();
    expect((await store.get(recentReplayed.id))?.status).toBe('replayed');
    expect((await store.get(oldPending.id))?.status).toBe('pending');
    expect(await store.purge(cutoff)).toBe(0);
  });
});

describe('DeadLetterStore.stats', () => {
  it('counts by status, by tenant and reason, and per UTC bucket', async () => {
    // Far in the future of every other row in this schema, so `since` isolates these.
    const base = Date.UTC(2030, 0, 1, 0, 0, 0);
    const a = [
      letter({ tenantId: 'stats-a', reason: 'decode_error', failedAt: base + 5 * 60_000 }),
      letter({ tenantId: 'stats-a', reason: 'decode_error', failedAt: base + 50 * 60_000 }),
      letter({ tenantId: 'stats-a', reason: 'non_retryable', failedAt: base + HOUR + 1 }),
      letter({ tenantId: 'stats-b', reason: 'decode_error', failedAt: base + 25 * HOUR }),
    ];
    await store.archive(a);
    const ids = (await store.list({ since: new Date(base) })).map((r) => r.id);
    await store.discard([ids[0]!], 'op', 'obsolete');

    const hourly = await store.stats({ since: new Date(base), bucket: 'hour' });
    expect(hourly.total).toBe(4);
    expect(hourly.byStatus).toEqual({ pending: 3, replayed: 0, discarded: 1 });
    expect(hourly.byTenantReason).toEqual([
      { tenantId: 'stats-a', reason: 'decode_error', total: 2, pending: 2 },
      { tenantId: 'stats-a', reason: 'non_retryable', total: 1, pending: 1 },
      { tenantId: 'stats-b', reason: 'decode_error', total: 1, pending: 0 },
    ]);
    expect(hourly.overTime).toEqual([
      { bucket: new Date(base), total: 2 },
      { bucket: new Date(base + HOUR), total: 1 },
      { bucket: new Date(base + 25 * HOUR), total: 1 },
    ]);
    const daily = await store.stats({ since: new Date(base), bucket: 'day' });
    expect(daily.overTime).toEqual([
      { bucket: new Date(base), total: 3 },
      { bucket: new Date(base + 24 * HOUR), total: 1 },
    ]);
    expect((await store.countByStatus(new Date(base))).discarded).toBe(1);
    const everything = await store.stats({ bucket: 'day' });
    expect(everything.total).toBeGreaterThan(4);
    expect(everything.since).toBeNull();
  });
});

describe('DeadLetterStore namespaces', () => {
  it('sees, replays, discards, counts and purges only the rows of its own namespace', async () => {
    const ours = new DeadLetterStore(pool, { namespace: 'env-a.' });
    const theirs = new DeadLetterStore(pool, { namespace: 'env-b.' });
    const tenant = `ns-${randomBytes(3).toString('hex')}`;
    await ours.archive([letter({ tenantId: tenant })]);
    await theirs.archive([letter({ tenantId: tenant })]);
    const [mine] = await ours.list({ tenant });
    const [other] = await theirs.list({ tenant });
    expect(mine && other && mine.id !== other.id).toBe(true);
    expect(await ours.list({ tenant })).toHaveLength(1);
    expect(await ours.get(other!.id)).toBeUndefined();
    expect(await ours.replayOne(other!.id, 'op', async () => 'sent')).toMatchObject({ result: 'skipped', why: 'not_found' });
    expect(await ours.discard([other!.id], 'op', 'not ours')).toMatchObject({ discarded: [], notFound: [other!.id] });
    expect((await theirs.get(other!.id))!.status).toBe('pending');
    expect((await ours.countByStatus()).pending).toBe(1);
  });
});
