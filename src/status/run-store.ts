import type { Pool, PoolClient } from 'pg';
import type { Run, RunEvent } from '../client/types.js';
import { inTransaction } from '../db/pool.js';
import type { RunClass, RunError, RunEventBase, RunStatus, RunStatusChanged } from '../events/schemas.js';
import { foldStatusEvents } from './run-history.js';
import { ADMITTED_SEQUENCE } from '../runs/status-sequence.js';
import { storableJsonText, storableNullableText, storableText } from '../db/storable-text.js';
import { runUsageOf, type PricedUsage, type RunUsage } from './run-usage.js';

/** A run as `GET /v1/runs/:id` shows it, but for the links the route adds: the client's contract type. */
export type RunView = Omit<Run, 'links'>;

/** A run as the submit path records it, before any status event arrives. */
export type AdmittedRun = Pick<RunEventBase, 'runId' | 'tenantId' | 'workflow' | 'class' | 'admittedAt' | 'deadline'> & { message: string };

interface RunRow {
  run_id: string;
  workflow: string;
  class: RunClass;
  status: RunStatus;
  status_message: string;
  admitted_at: Date;
  deadline: Date;
  started_at: Date | null;
  finished_at: Date | null;
  attempts: number;
  result: unknown;
  error: RunError | null;
}

/** Columns of `run_usage` as pg returns them: bigint and numeric as text. */
interface RunUsageColumns {
  llm_calls: number | null;
  input_tokens: string | null;
  output_tokens: string | null;
  cache_creation_input_tokens: string | null;
  cache_read_input_tokens: string | null;
  cost_usd: string | null;
  by_model: Record<string, PricedUsage> | null;
}

function toUsage(u: RunUsageColumns): RunUsage | undefined {
  if (u.llm_calls === null || u.by_model === null) return undefined;
  return {
    inputTokens: Number(u.input_tokens),
    outputTokens: Number(u.output_tokens),
    cacheCreationInputTokens: Number(u.cache_creation_input_tokens),
    cacheReadInputTokens: Number(u.cache_read_input_tokens),
    llmCalls: u.llm_calls,
    costUsd: u.cost_usd === null ? null : Number(u.cost_usd),
    byModel: u.by_model,
  };
}

function toView(r: RunRow & RunUsageColumns): RunView {
  const usage = toUsage(r);
  return {
    runId: r.run_id,
    workflow: r.workflow,
    class: r.class,
    status: r.status,
    statusMessage: r.status_message,
    admittedAt: r.admitted_at.toISOString(),
    deadline: r.deadline.toISOString(),
    ...(r.started_at ? { startedAt: r.started_at.toISOString() } : {}),
    ...(r.finished_at ? { finishedAt: r.finished_at.toISOString() } : {}),
    attempts: r.attempts,
    ...(r.result !== null && r.result !== undefined ? { result: r.result } : {}),
    ...(r.error ? { error: r.error } : {}),
    ...(usage ? { usage } : {}),
  };
}

/** What an operator looks runs up by (the console's Runs page); every field narrows. */
export interface RunFilter {
  runId?: string;
  tenantId?: string;
  workflow?: string;
  status?: RunStatus;
  /** Admitted at or after (epoch ms). */
  since?: number;
  /** Admitted before (epoch ms). */
  until?: number;
  limit: number;
}

/** A run as an operator sees it: any tenant's, so it names its tenant. */
export type OperatorRunView = RunView & { tenantId: string };

/** One status transition as the SSE stream sends it. */
export type RunEventView = RunEvent;

interface RunEventRow {
  run_id: string;
  sequence: string;
  status: RunStatus;
  message: string;
  step: string | null;
  attempt: number;
  occurred_at: Date;
  result: unknown;
  error: RunError | null;
}

function toEventView(r: RunEventRow): RunEventView {
  return {
    runId: r.run_id,
    sequence: Number(r.sequence),
    status: r.status,
    message: r.message,
    step: r.step,
    attempt: r.attempt,
    occurredAt: r.occurred_at.toISOString(),
    ...(r.result !== null && r.result !== undefined ? { result: r.result } : {}),
    ...(r.error ? { error: r.error } : {}),
  };
}

/**
 * The Postgres NOTIFY channel that announces new `run_events` rows; the payload is the run id.
 * One channel for every namespace: run ids are unique, and listeners filter by id.
 */
export const RUN_EVENTS_CHANNEL = 'sluice_run_events';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const ts = (ms: number | null) => (ms === null ? null : new Date(ms));

/**
 * The event with every text Postgres stores made storable (see storable-text.ts): a result or an
 * error echoing a caller's NUL or a lone surrogate must not make the whole batch unwritable.
 */
export function storableStatusEvent(e: RunStatusChanged): RunStatusChanged {
  return {
    ...e,
    tenantId: storableText(e.tenantId),
    workflow: storableText(e.workflow),
    message: storableText(e.message),
    step: storableNullableText(e.step),
    result: e.result === null ? null : storableJsonText(e.result),
    error: e.error === null ? null : { ...e.error, code: storableText(e.error.code), message: storableText(e.error.message) },
  };
}

/** Postgres `runs` / `run_events` / `run_usage`: the read model behind GET /v1/runs/:id and SSE. */
export class RunStore {
  /** `namespace` marks the usage rows this store writes, so environments sharing a database sum only their own. */
  constructor(
    private readonly pool: Pool,
    private readonly opts: { namespace?: string } = {},
  ) {}

  /**
   * Written for the submit adapter once Kafka acknowledged the event, so a GET that follows the
   * 202 finds the run (read-your-writes) even before the status sink has seen anything.
   */
  async recordAdmission(run: AdmittedRun): Promise<void> {
    await this.recordAdmissions([run]);
  }

  /**
   * The rows of many admitted runs in one statement (the write-behind batches them). A row the
   * status sink wrote first stays as it is: its events are newer than the admission.
   */
  async recordAdmissions(runs: readonly AdmittedRun[]): Promise<void> {
    if (runs.length === 0) return;
    await this.pool.query(
      `WITH a AS (
         SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[])
           AS a(run_id, tenant_id, workflow, class, message, admitted_at, deadline)
       ), ins AS (
         INSERT INTO runs (run_id, tenant_id, workflow, class, status, status_message, admitted_at, deadline, last_sequence)
         SELECT run_id, tenant_id, workflow, class, 'queued', message, admitted_at, deadline, $8 FROM a
         ON CONFLICT (run_id) DO NOTHING
       )
       INSERT INTO run_events (run_id, sequence, status, message, attempt, occurred_at)
       SELECT run_id, $8, 'queued', message, 0, admitted_at FROM a
       ON CONFLICT (run_id, sequence) DO NOTHING`,
      [
        runs.map((r) => r.runId),
        runs.map((r) => storableText(r.tenantId)),
        runs.map((r) => storableText(r.workflow)),
        runs.map((r) => r.class),
        runs.map((r) => storableText(r.message)),
        runs.map((r) => ts(r.admittedAt)),
        runs.map((r) => ts(r.deadline)),
        ADMITTED_SEQUENCE,
      ],
    );
  }

  /**
   * Applies status events idempotently in one transaction: events are keyed by (runId, sequence),
   * and a run's row only moves forward (a late or duplicate event never regresses it).
   */
  async applyStatusEvents(batch: readonly RunStatusChanged[]): Promise<void> {
    if (batch.length === 0) return;
    const events = batch.map(storableStatusEvent);
    await inTransaction(this.pool, async (client) => {
      await insertEvents(client, events);
      await upsertRuns(client, events);
      await insertUsage(client, events, this.opts.namespace ?? '');
      // Delivered only when the transaction commits, so a listener that wakes finds the rows.
      await client.query('SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id', [RUN_EVENTS_CHANNEL, [...new Set(events.map((e) => e.runId))]]);
    });
  }

  async getRun(runId: string, tenantId: string): Promise<RunView | undefined> {
    const { rows } = await this.pool.query<RunRow & RunUsageColumns>(
      `SELECT r.run_id, r.workflow, r.class, r.status, r.status_message, r.admitted_at, r.deadline, r.started_at, r.finished_at, r.attempts, r.result, r.error,
              u.llm_calls, u.input_tokens, u.output_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens, u.cost_usd, u.by_model
         FROM runs r LEFT JOIN run_usage u ON u.run_id = r.run_id
        WHERE r.run_id = $1 AND r.tenant_id = $2`,
      [runId, tenantId],
    );
    return rows[0] ? toView(rows[0]) : undefined;
  }

  /** Runs of any tenant matching `filter`, newest admission first (the run id is a uuid: a malformed one matches none). */
  async findRuns(filter: RunFilter): Promise<OperatorRunView[]> {
    if (filter.runId !== undefined && !UUID.test(filter.runId)) return [];
    const { rows } = await this.pool.query<RunRow & RunUsageColumns & { tenant_id: string }>(
      `SELECT r.run_id, r.tenant_id, r.workflow, r.class, r.status, r.status_message, r.admitted_at, r.deadline, r.started_at, r.finished_at, r.attempts, r.result, r.error,
              u.llm_calls, u.input_tokens, u.output_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens, u.cost_usd, u.by_model
         FROM runs r LEFT JOIN run_usage u ON u.run_id = r.run_id
        WHERE ($1::uuid IS NULL OR r.run_id = $1) AND ($2::text IS NULL OR r.tenant_id = $2) AND ($3::text IS NULL OR r.workflow = $3)
          AND ($4::text IS NULL OR r.status = $4) AND ($5::timestamptz IS NULL OR r.admitted_at >= $5) AND ($6::timestamptz IS NULL OR r.admitted_at < $6)
        ORDER BY r.admitted_at DESC
        LIMIT $7`,
      [filter.runId ?? null, filter.tenantId ?? null, filter.workflow ?? null, filter.status ?? null, ts(filter.since ?? null), ts(filter.until ?? null), filter.limit],
    );
    return rows.map((r) => ({ ...toView(r), tenantId: r.tenant_id }));
  }

  /** The tenant's run's transitions after `afterSequence`, oldest first; none for another tenant's run. */
  async listEvents(runId: string, tenantId: string, afterSequence: number, limit: number): Promise<RunEventView[]> {
    const { rows } = await this.pool.query<RunEventRow>(
      `SELECT e.run_id, e.sequence, e.status, e.message, e.step, e.attempt, e.occurred_at, e.result, e.error
         FROM run_events e JOIN runs r ON r.run_id = e.run_id
        WHERE e.run_id = $1 AND r.tenant_id = $2 AND e.sequence > $3
        ORDER BY e.sequence
        LIMIT $4`,
      [runId, tenantId, afterSequence, limit],
    );
    return rows.map(toEventView);
  }
}

async function insertEvents(client: PoolClient, events: readonly RunStatusChanged[]): Promise<void> {
  await client.query(
    `INSERT INTO run_events (run_id, sequence, status, message, step, attempt, occurred_at, result, error)
     SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::int[], $7::timestamptz[], $8::jsonb[], $9::jsonb[])
     ON CONFLICT (run_id, sequence) DO NOTHING`,
    [
      events.map((e) => e.runId),
      events.map((e) => e.sequence),
      events.map((e) => e.status),
      events.map((e) => e.message),
      events.map((e) => e.step),
      events.map((e) => e.attempt),
      events.map((e) => new Date(e.occurredAt)),
      events.map((e) => e.result),
      events.map((e) => (e.error ? JSON.stringify(e.error) : null)),
    ],
  );
}

async function upsertRuns(client: PoolClient, events: readonly RunStatusChanged[]): Promise<void> {
  const patches = foldStatusEvents(events);
  await client.query(
    `INSERT INTO runs AS r (run_id, tenant_id, workflow, class, status, status_message, admitted_at, deadline,
                            started_at, finished_at, attempts, result, error, last_sequence, updated_at)
     SELECT p.*, now() FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[],
                                   $8::timestamptz[], $9::timestamptz[], $10::timestamptz[], $11::int[], $12::jsonb[], $13::jsonb[], $14::bigint[])
          AS p(run_id, tenant_id, workflow, class, status, status_message, admitted_at, deadline, started_at, finished_at, attempts, result, error, last_sequence)
     ON CONFLICT (run_id) DO UPDATE SET
       status         = EXCLUDED.status,
       status_message = EXCLUDED.status_message,
       started_at     = COALESCE(r.started_at, EXCLUDED.started_at),
       finished_at    = EXCLUDED.finished_at,
       attempts       = GREATEST(r.attempts, EXCLUDED.attempts),
       result         = COALESCE(EXCLUDED.result, r.result),
       error          = EXCLUDED.error,
       last_sequence  = EXCLUDED.last_sequence,
       updated_at     = now()
     WHERE r.last_sequence < EXCLUDED.last_sequence`,
    [
      patches.map((p) => p.runId),
      patches.map((p) => p.tenantId),
      patches.map((p) => p.workflow),
      patches.map((p) => p.class),
      patches.map((p) => p.status),
      patches.map((p) => p.statusMessage),
      patches.map((p) => ts(p.admittedAt)),
      patches.map((p) => ts(p.deadline)),
      patches.map((p) => ts(p.startedAt)),
      patches.map((p) => ts(p.finishedAt)),
      patches.map((p) => p.attempts),
      patches.map((p) => p.result),
      patches.map((p) => (p.error ? JSON.stringify(p.error) : null)),
      patches.map((p) => p.lastSequence),
    ],
  );
}

/**
 * The usage of each completed event whose result carries one. A run completes once, so the first
 * row written stands: a redelivered or repeated completion changes nothing.
 */
async function insertUsage(client: PoolClient, events: readonly RunStatusChanged[], namespace: string): Promise<void> {
  const rows = events.flatMap((event) => {
    const usage = event.status === 'completed' ? runUsageOf(event.result) : undefined;
    return usage ? [{ event, usage }] : [];
  });
  if (rows.length === 0) return;
  await client.query(
    `INSERT INTO run_usage (run_id, namespace, tenant_id, workflow, class, finished_at, llm_calls, input_tokens, output_tokens,
                            cache_creation_input_tokens, cache_read_input_tokens, cost_usd, by_model)
     SELECT u.run_id, $2, u.tenant_id, u.workflow, u.class, u.finished_at, u.llm_calls, u.input_tokens, u.output_tokens,
            u.cache_creation_input_tokens, u.cache_read_input_tokens, u.cost_usd, u.by_model
       FROM unnest($1::uuid[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::int[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::numeric[], $13::jsonb[])
         AS u(run_id, tenant_id, workflow, class, finished_at, llm_calls, input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens, cost_usd, by_model)
     ON CONFLICT (run_id) DO NOTHING`,
    [
      rows.map((r) => r.event.runId),
      namespace,
      rows.map((r) => r.event.tenantId),
      rows.map((r) => r.event.workflow),
      rows.map((r) => r.event.class),
      rows.map((r) => new Date(r.event.occurredAt)),
      rows.map((r) => r.usage.llmCalls),
      rows.map((r) => r.usage.inputTokens),
      rows.map((r) => r.usage.outputTokens),
      rows.map((r) => r.usage.cacheCreationInputTokens),
      rows.map((r) => r.usage.cacheReadInputTokens),
      rows.map((r) => r.usage.costUsd),
      rows.map((r) => JSON.stringify(r.usage.byModel)),
    ],
  );
}
