import type { Pool, PoolClient } from 'pg';
import { inTransaction } from '../db/pool.js';
import { storableJson, storableNullableText, storableText } from '../db/storable-text.js';

/** One record of the DLQ topic as archived: the envelope's fields, its headers and, when decodable, the run. */
export interface ArchivedDeadLetter {
  originalTopic: string;
  originalPartition: number;
  originalOffset: string;
  originalKey: Buffer | null;
  consumerGroup: string;
  tenantId: string | null;
  workflow: string | null;
  runId: string | null;
  /** Machine-readable cause from the `sluice-dlt-reason` header, e.g. `decode_error`. */
  reason: string;
  payload: Buffer;
  /** The original record decoded (a RunRequested), or null when it could not be. */
  payloadJson: unknown;
  headers: Record<string, string>;
  errorClass: string;
  errorMessage: string;
  errorStack: string | null;
  attempts: number;
  firstFailedAt: number;
  failedAt: number;
}

const COLUMNS = [
  'namespace',
  'original_topic',
  'original_partition',
  'original_offset',
  'original_key',
  'consumer_group',
  'tenant_id',
  'workflow',
  'run_id',
  'reason',
  'payload',
  'payload_json',
  'headers',
  'error_class',
  'error_message',
  'error_stack',
  'attempts',
  'first_failed_at',
  'failed_at',
] as const;

/** A row's column values, every text made storable: headers and error text carry whatever a record held. */
function values(namespace: string, r: ArchivedDeadLetter): unknown[] {
  return [
    namespace,
    storableText(r.originalTopic),
    r.originalPartition,
    r.originalOffset,
    r.originalKey,
    storableText(r.consumerGroup),
    storableNullableText(r.tenantId),
    storableNullableText(r.workflow),
    r.runId,
    storableText(r.reason),
    r.payload,
    storableJson(r.payloadJson),
    storableJson(r.headers),
    storableText(r.errorClass),
    storableText(r.errorMessage),
    storableNullableText(r.errorStack),
    r.attempts,
    new Date(r.firstFailedAt),
    new Date(r.failedAt),
  ];
}

export const DEAD_LETTER_STATUSES = ['pending', 'replayed', 'discarded'] as const;
export type DeadLetterStatus = (typeof DEAD_LETTER_STATUSES)[number];

/** Rows a query returns unless told otherwise, and the most it ever returns. */
export const DEFAULT_LIST_LIMIT = 50;
export const MAX_LIST_LIMIT = 10_000;

/** Every field is optional; all given ones must hold. */
export interface DeadLetterFilter {
  tenant?: string;
  workflow?: string;
  /** The `sluice-dlt-reason` code, e.g. `decode_error`. */
  reason?: string;
  /** Omitted: every status. */
  status?: DeadLetterStatus;
  /** `failed_at >= since`. */
  since?: Date;
  /** `failed_at < until`. */
  until?: Date;
  ids?: readonly string[];
  /** 1..MAX_LIST_LIMIT; DEFAULT_LIST_LIMIT, or as many as `ids`, when omitted. */
  limit?: number;
}

/** What a listing shows of a row. Ids are bigserial, so they travel as decimal strings. */
export interface DeadLetterSummary {
  id: string;
  failedAt: Date;
  tenantId: string | null;
  workflow: string | null;
  runId: string | null;
  reason: string;
  errorClass: string;
  errorMessage: string;
  attempts: number;
  status: DeadLetterStatus;
  originalTopic: string;
  replayCount: number;
}

/** A row with everything in it. */
export interface DeadLetterRow extends DeadLetterSummary {
  originalPartition: number;
  originalOffset: string;
  originalKey: Buffer | null;
  consumerGroup: string;
  payload: Buffer;
  payloadJson: unknown;
  headers: Record<string, string>;
  errorStack: string | null;
  firstFailedAt: Date;
  archivedAt: Date;
  replayedAt: Date | null;
  replayedBy: string | null;
  discardedAt: Date | null;
  discardedBy: string | null;
  discardReason: string | null;
}

/** Why a row was not replayed: handled already, gone, or held by a concurrent replay. */
export type ReplaySkip = 'not_found' | 'replayed' | 'discarded' | 'locked';

export type ReplayOutcome<T> =
  | { id: string; result: 'replayed'; value: T }
  | { id: string; result: 'skipped'; why: ReplaySkip }
  | { id: string; result: 'failed'; error: Error };

export interface DiscardResult {
  discarded: string[];
  notFound: string[];
  notPending: { id: string; status: DeadLetterStatus }[];
}

export type StatsBucket = 'hour' | 'day';

export interface DeadLetterStats {
  since: Date | null;
  bucket: StatsBucket;
  total: number;
  byStatus: Record<DeadLetterStatus, number>;
  /** Largest groups first, at most MAX_LIST_LIMIT of them. */
  byTenantReason: { tenantId: string | null; reason: string; total: number; pending: number }[];
  /** Oldest bucket first; the latest MAX_LIST_LIMIT buckets that have rows. */
  overTime: { bucket: Date; total: number }[];
}

export interface DeadLetterStoreOptions {
  /** Statement timeout inside a replay's row transaction, whatever the pool's default. */
  statementTimeoutMs?: number;
  /** The config's namespace: rows are written under it, and only its rows are read or changed. */
  namespace?: string;
}

const PURGE_CHUNK = 5_000;

const SUMMARY_SELECT = `id::text AS id, failed_at, tenant_id, workflow, run_id, reason, error_class, error_message, attempts, status,
  original_topic, replay_count`;
const ROW_SELECT = `${SUMMARY_SELECT}, original_partition, original_offset::text AS original_offset, original_key, consumer_group,
  payload, payload_json, headers, error_stack, first_failed_at, archived_at, replayed_at, replayed_by, discarded_at, discarded_by, discard_reason`;

interface SummaryRecord {
  id: string;
  failed_at: Date;
  tenant_id: string | null;
  workflow: string | null;
  run_id: string | null;
  reason: string;
  error_class: string;
  error_message: string;
  attempts: number;
  status: DeadLetterStatus;
  original_topic: string;
  replay_count: number;
}

interface RowRecord extends SummaryRecord {
  original_partition: number;
  original_offset: string;
  original_key: Buffer | null;
  consumer_group: string;
  payload: Buffer;
  payload_json: unknown;
  headers: Record<string, string>;
  error_stack: string | null;
  first_failed_at: Date;
  archived_at: Date;
  replayed_at: Date | null;
  replayed_by: string | null;
  discarded_at: Date | null;
  discarded_by: string | null;
  discard_reason: string | null;
}

function toSummary(r: SummaryRecord): DeadLetterSummary {
  return {
    id: r.id,
    failedAt: r.failed_at,
    tenantId: r.tenant_id,
    workflow: r.workflow,
    runId: r.run_id,
    reason: r.reason,
    errorClass: r.error_class,
    errorMessage: r.error_message,
    attempts: r.attempts,
    status: r.status,
    originalTopic: r.original_topic,
    replayCount: r.replay_count,
  };
}

function toRow(r: RowRecord): DeadLetterRow {
  return {
    ...toSummary(r),
    originalPartition: r.original_partition,
    originalOffset: r.original_offset,
    originalKey: r.original_key,
    consumerGroup: r.consumer_group,
    payload: r.payload,
    payloadJson: r.payload_json,
    headers: r.headers,
    errorStack: r.error_stack,
    firstFailedAt: r.first_failed_at,
    archivedAt: r.archived_at,
    replayedAt: r.replayed_at,
    replayedBy: r.replayed_by,
    discardedAt: r.discarded_at,
    discardedBy: r.discarded_by,
    discardReason: r.discard_reason,
  };
}

function listLimit(f: DeadLetterFilter): number {
  const limit = f.limit ?? (f.ids ? Math.min(Math.max(f.ids.length, 1), MAX_LIST_LIMIT) : DEFAULT_LIST_LIMIT);
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIST_LIMIT) throw new RangeError(`limit must be an integer from 1 to ${MAX_LIST_LIMIT}, not ${limit}`);
  return limit;
}

/** The WHERE clause of a filter within a namespace, its values appended to `params`. */
function whereClause(namespace: string, f: Omit<DeadLetterFilter, 'limit'>, params: unknown[]): string {
  const conditions: string[] = [];
  const add = (column: string, op: string, value: unknown) => {
    params.push(value);
    conditions.push(`${column} ${op} $${params.length}`);
  };
  add('namespace', '=', namespace);
  if (f.tenant !== undefined) add('tenant_id', '=', f.tenant);
  if (f.workflow !== undefined) add('workflow', '=', f.workflow);
  if (f.reason !== undefined) add('reason', '=', f.reason);
  if (f.status !== undefined) add('status', '=', f.status);
  if (f.since !== undefined) add('failed_at', '>=', f.since);
  if (f.until !== undefined) add('failed_at', '<', f.until);
  if (f.ids !== undefined) {
    params.push(f.ids);
    conditions.push(`id = ANY($${params.length}::bigint[])`);
  }
  return `WHERE ${conditions.join(' AND ')}`;
}

const coordinates = (topic: string, partition: number, offset: string) => `${topic}\u0000${partition}\u0000${offset}`;

/** Postgres `dead_letter_events`: the DLQ archive behind the DLQ sink and `sluice dlq`. */
export class DeadLetterStore {
  private readonly statementTimeoutMs: number;
  private readonly namespace: string;

  constructor(
    private readonly pool: Pool,
    opts: DeadLetterStoreOptions = {},
  ) {
    this.statementTimeoutMs = opts.statementTimeoutMs ?? 5_000;
    this.namespace = opts.namespace ?? '';
  }

  /**
   * Archives a batch in one statement, idempotent on the original record's coordinates: a record
   * delivered twice (a sink killed before committing its offsets) is stored once. Resolves to the
   * rows that were new.
   */
  async archive(rows: readonly ArchivedDeadLetter[]): Promise<ArchivedDeadLetter[]> {
    // A record twice in one batch is one record: keep its first copy, so it is reported new once.
    const byKey = new Map<string, ArchivedDeadLetter>();
    for (const r of rows) {
      const key = coordinates(storableText(r.originalTopic), r.originalPartition, r.originalOffset);
      if (!byKey.has(key)) byKey.set(key, r);
    }
    const batch = [...byKey.values()];
    if (batch.length === 0) return [];
    const params: unknown[] = [];
    const tuples = batch.map((r) => {
      const start = params.length;
      params.push(...values(this.namespace, r));
      return `(${COLUMNS.map((_, i) => `$${start + i + 1}`).join(', ')})`;
    });
    const { rows: inserted } = await this.pool.query<{ original_topic: string; original_partition: number; original_offset: string }>(
      `INSERT INTO dead_letter_events (${COLUMNS.join(', ')}) VALUES ${tuples.join(', ')}
       ON CONFLICT (original_topic, original_partition, original_offset) DO NOTHING
       RETURNING original_topic, original_partition, original_offset`,
      params,
    );
    const fresh = new Set(inserted.map((r) => coordinates(r.original_topic, r.original_partition, r.original_offset)));
    return batch.filter((r) => fresh.has(coordinates(storableText(r.originalTopic), r.originalPartition, r.originalOffset)));
  }

  /** Newest first, at most `limit` rows. */
  async list(filter: DeadLetterFilter = {}): Promise<DeadLetterSummary[]> {
    const params: unknown[] = [];
    const where = whereClause(this.namespace, filter, params);
    params.push(listLimit(filter));
    const { rows } = await this.pool.query<SummaryRecord>(
      `SELECT ${SUMMARY_SELECT} FROM dead_letter_events ${where} ORDER BY failed_at DESC, id DESC LIMIT $${params.length}`,
      params,
    );
    return rows.map(toSummary);
  }

  async get(id: string): Promise<DeadLetterRow | undefined> {
    const { rows } = await this.pool.query<RowRecord>(`SELECT ${ROW_SELECT} FROM dead_letter_events WHERE id = $1 AND namespace = $2`, [id, this.namespace]);
    return rows[0] && toRow(rows[0]);
  }

  /**
   * Replays a pending row once however many replayers race for it: `produce` runs while this
   * transaction holds the row lock, and the row is marked replayed in the same transaction, so a
   * concurrent replay skips the locked row, and one that comes later finds it replayed. When
   * `produce` fails the transaction rolls back and the row stays pending. Never rejects: every
   * failure is an outcome, so a caller working through many rows can go on.
   *
   * At least once, not exactly once: should the commit fail after `produce` succeeded, the row
   * stays pending although its event went out.
   */
  async replayOne<T>(id: string, who: string, produce: (row: DeadLetterRow) => Promise<T>): Promise<ReplayOutcome<T>> {
    let produced = false;
    try {
      return await inTransaction(this.pool, async (client): Promise<ReplayOutcome<T>> => {
        await client.query(`SELECT set_config('statement_timeout', $1, true)`, [String(this.statementTimeoutMs)]);
        const { rows } = await client.query<RowRecord>(`SELECT ${ROW_SELECT} FROM dead_letter_events WHERE id = $1 AND namespace = $2 AND status = 'pending' FOR UPDATE SKIP LOCKED`, [id, this.namespace]);
        if (!rows[0]) return { id, result: 'skipped', why: await skipReason(client, id, this.namespace) };
        const value = await produce(toRow(rows[0]));
        produced = true;
        await client.query(`UPDATE dead_letter_events SET status = 'replayed', replayed_at = now(), replayed_by = $2, replay_count = replay_count + 1 WHERE id = $1`, [id, who]);
        return { id, result: 'replayed', value };
      });
    } catch (err) {
      const error = produced ? new Error(`the event was produced, but the row could not be marked replayed and stays pending: ${(err as Error).message}`, { cause: err }) : (err as Error);
      return { id, result: 'failed', error };
    }
  }

  /** Discards pending rows only; the others are reported, as missing or with their status. */
  async discard(ids: readonly string[], who: string, reason: string): Promise<DiscardResult> {
    if (reason.trim() === '') throw new Error('a discard needs a reason');
    const unique = [...new Set(ids)];
    // The outer SELECT sees the table as it was before the UPDATE: the status a row was not discarded in.
    const { rows } = await this.pool.query<{ id: string; discarded: boolean; status: DeadLetterStatus | null }>(
      `WITH done AS (
         UPDATE dead_letter_events SET status = 'discarded', discarded_at = now(), discarded_by = $2, discard_reason = $3
         WHERE id = ANY($1::bigint[]) AND namespace = $4 AND status = 'pending'
         RETURNING id
       )
       SELECT t.id::text AS id, done.id IS NOT NULL AS discarded, d.status
       FROM unnest($1::bigint[]) AS t(id) LEFT JOIN done ON done.id = t.id LEFT JOIN dead_letter_events d ON d.id = t.id AND d.namespace = $4`,
      [unique, who, reason, this.namespace],
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    const result: DiscardResult = { discarded: [], notFound: [], notPending: [] };
    for (const id of unique) {
      const r = byId.get(id);
      if (r?.discarded) result.discarded.push(id);
      else if (r?.status) result.notPending.push({ id, status: r.status });
      else result.notFound.push(id);
    }
    return result;
  }

  async countByStatus(since?: Date): Promise<Record<DeadLetterStatus, number>> {
    const params: unknown[] = [];
    const { rows } = await this.pool.query<{ status: DeadLetterStatus; total: string }>(
      `SELECT status, count(*) AS total FROM dead_letter_events ${whereClause(this.namespace, { since }, params)} GROUP BY status`,
      params,
    );
    const counts: Record<DeadLetterStatus, number> = { pending: 0, replayed: 0, discarded: 0 };
    for (const r of rows) counts[r.status] = Number(r.total);
    return counts;
  }

  /** Counts of rows that failed since `since` (all rows without it), in UTC buckets over time. */
  async stats(opts: { since?: Date; bucket: StatsBucket }): Promise<DeadLetterStats> {
    const params: unknown[] = [];
    const where = whereClause(this.namespace, { since: opts.since }, params);
    const [byStatus, groups, series] = await Promise.all([
      this.countByStatus(opts.since),
      this.pool.query<{ tenant_id: string | null; reason: string; total: string; pending: string }>(
        `SELECT tenant_id, reason, count(*) AS total, count(*) FILTER (WHERE status = 'pending') AS pending
         FROM dead_letter_events ${where}
         GROUP BY tenant_id, reason ORDER BY count(*) DESC, tenant_id, reason LIMIT ${MAX_LIST_LIMIT}`,
        params,
      ),
      this.pool.query<{ bucket: Date; total: string }>(
        `SELECT date_trunc($${params.length + 1}, failed_at, 'UTC') AS bucket, count(*) AS total
         FROM dead_letter_events ${where}
         GROUP BY 1 ORDER BY 1 DESC LIMIT ${MAX_LIST_LIMIT}`,
        [...params, opts.bucket],
      ),
    ]);
    return {
      since: opts.since ?? null,
      bucket: opts.bucket,
      total: byStatus.pending + byStatus.replayed + byStatus.discarded,
      byStatus,
      byTenantReason: groups.rows.map((r) => ({ tenantId: r.tenant_id, reason: r.reason, total: Number(r.total), pending: Number(r.pending) })),
      overTime: series.rows.reverse().map((r) => ({ bucket: r.bucket, total: Number(r.total) })),
    };
  }

  /**
   * Deletes replayed and discarded rows handled before `olderThan`; pending rows are never
   * purged. Works in chunks so no statement outlives the statement timeout on a large backlog.
   */
  async purge(olderThan: Date): Promise<number> {
    let purged = 0;
    for (;;) {
      const { rowCount } = await this.pool.query(
        `DELETE FROM dead_letter_events WHERE id IN (
           SELECT id FROM dead_letter_events
           WHERE namespace = $3 AND ((status = 'replayed' AND replayed_at < $1) OR (status = 'discarded' AND discarded_at < $1))
           LIMIT $2)`,
        [olderThan, PURGE_CHUNK, this.namespace],
      );
      purged += rowCount ?? 0;
      if ((rowCount ?? 0) < PURGE_CHUNK) return purged;
    }
  }
}

/** Why the row a replay wanted was not there for it; read after the transaction, from committed state. */
async function skipReason(client: PoolClient, id: string, namespace: string): Promise<ReplaySkip> {
  const { rows } = await client.query<{ status: DeadLetterStatus }>('SELECT status FROM dead_letter_events WHERE id = $1 AND namespace = $2', [id, namespace]);
  const status = rows[0]?.status;
  if (status === undefined) return 'not_found';
  return status === 'pending' ? 'locked' : status;
}
