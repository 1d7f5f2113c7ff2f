import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { RunStatusChanged } from '../../src/events/schemas.js';
import { createLogger } from '../../src/obs/logger.js';
import { createMetrics } from '../../src/obs/metrics.js';
import { AdmissionRows } from '../../src/status/admission-rows.js';
import { RunStore, type AdmittedRun } from '../../src/status/run-store.js';
import { openMigratedSchema, type MigratedSchema } from '../support/migrated-schema.js';

/** The admission rows written many per statement, and read before and after, against the real Postgres. */
let db: MigratedSchema;
let pool: pg.Pool;

beforeAll(async () => {
  db = await openMigratedSchema(inject('infra').databaseUrl, 'admission_rows');
  pool = db.pool;
});

afterAll(async () => {
  await db?.close();
});

const T0 = Date.parse('2026-12-01T10:00:00.000Z');

function admitted(over: Partial<AdmittedRun> = {}): AdmittedRun {
  return { runId: randomUUID(), tenantId: 'tenant-a', workflow: 'support-reply', class: 'interactive', admittedAt: T0, deadline: T0 + 30_000, message: 'queued: admitted, waiting for a processor', ...over };
}

function statusEvent(run: AdmittedRun, over: Partial<RunStatusChanged>): RunStatusChanged {
  return {
    runId: run.runId,
    tenantId: run.tenantId,
    workflow: run.workflow,
    class: run.class,
    admittedAt: run.admittedAt,
    deadline: run.deadline,
    attempt: 1,
    traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    sequence: 1001,
    status: 'running',
    occurredAt: run.admittedAt + 10,
    message: 'running',
    step: null,
    result: null,
    error: null,
    attemptStartedAt: run.admittedAt + 5,
    ...over,
  };
}

describe('RunStore.recordAdmissions', () => {
  it('writes every run of a batch with its admission event, as recordAdmission writes one', async () => {
    const store = new RunStore(pool);
    const runs = [admitted(), admitted({ tenantId: 'tenant-b', class: 'batch', workflow: 'report-digest', admittedAt: T0 + 1, deadline: T0 + 3_600_000, message: 'queued: waiting for capacity, position 3 in line' }), admitted({ message: 'queued \u0000' })];
    await store.recordAdmissions(runs);
    const single = admitted();
    await store.recordAdmission(single);
    for (const run of [...runs, single]) {
      expect(await store.getRun(run.runId, run.tenantId)).toEqual({
        runId: run.runId,
        workflow: run.workflow,
        class: run.class,
        status: 'queued',
        statusMessage: run.message.replace('\u0000', '\ufffd'),
        admittedAt: new Date(run.admittedAt).toISOString(),
        deadline: new Date(run.deadline).toISOString(),
        attempts: 0,
      });
      expect(await store.listEvents(run.runId, run.tenantId, -1, 10)).toEqual([
        { runId: run.runId, sequence: 0, status: 'queued', message: run.message.replace('\u0000', '\ufffd'), step: null, attempt: 0, occurredAt: new Date(run.admittedAt).toISOString() },
      ]);
    }
    expect(await store.getRun(runs[0]!.runId, 'tenant-b')).toBeUndefined();
  });

  it('leaves a row the status sink wrote first as it is, adds the admission event, and takes a repeated batch', async () => {
    const store = new RunStore(pool);
    const first = admitted();
    const other = admitted();
    await store.applyStatusEvents([statusEvent(first, {})]);
    await store.recordAdmissions([first, other, other]);
    await store.recordAdmissions([first, other]);
    expect(await store.getRun(first.runId, first.tenantId)).toMatchObject({ status: 'running', statusMessage: 'running' });
    expect((await store.listEvents(first.runId, first.tenantId, -1, 10)).map((e) => [e.sequence, e.status])).toEqual([
      [0, 'queued'],
      [1001, 'running'],
    ]);
    expect(await store.getRun(other.runId, other.tenantId)).toMatchObject({ status: 'queued' });
  });
});

describe('AdmissionRows (write-behind)', () => {
  const quiet = createLogger('silent');

  it('answers reads of a queued run from the queue, then from Postgres once written, in batches', async () => {
    const store = new RunStore(pool);
    const metrics = createMetrics();
    const rows = new AdmissionRows(store, { batchSize: 50, maxWaitMs: 60_000, maxPending: 1_000 }, { metrics, logger: quiet, addTimeoutMs: 1_000 });
    const runs = Array.from({ length: 120 }, (_, i) => admitted({ admittedAt: T0 + i }));
    await Promise.all(runs.map((r) => rows.recordAdmission(r)));
    // Two full batches went at once; the last 20 wait for maxWaitMs (a minute) or the close.
    const last = runs.at(-1)!;
    const { rowCount } = await pool.query('SELECT 1 FROM runs WHERE run_id = $1', [last.runId]);
    expect(rowCount).toBe(0);
    expect(await rows.getRun(last.runId, 'tenant-a')).toMatchObject({ runId: last.runId, status: 'queued', attempts: 0 });
    expect(await rows.getRun(last.runId, 'tenant-b')).toBeUndefined();
    expect(await rows.listEvents(last.runId, 'tenant-a', -1, 100)).toEqual([
      { runId: last.runId, sequence: 0, status: 'queued', message: last.message, step: null, attempt: 0, occurredAt: new Date(last.admittedAt).toISOString() },
    ]);
    expect(await rows.listEvents(last.runId, 'tenant-a', 0, 100)).toEqual([]);
    expect(await rows.listEvents(last.runId, 'tenant-b', -1, 100)).toEqual([]);

    await rows.close(5_000);
    const { rows: stored } = await pool.query<{ n: string }>('SELECT count(*) AS n FROM runs WHERE run_id = ANY($1::uuid[])', [runs.map((r) => r.runId)]);
    expect(Number(stored[0]!.n)).toBe(120);
    expect(await rows.getRun(last.runId, 'tenant-a')).toEqual(await store.getRun(last.runId, 'tenant-a'));
    const text = await metrics.registry.getSingleMetricAsString('sluice_admission_rows_batch_size');
    expect(text).toContain('sluice_admission_rows_batch_size_count 3');
    expect(text).toContain('sluice_admission_rows_batch_size_sum 120');
  });

  it('sets aside a row Postgres refuses for good and writes the rest of its batch', async () => {
    const store = new RunStore(pool);
    const metrics = createMetrics();
    const rows = new AdmissionRows(store, { batchSize: 10, maxWaitMs: 0, maxPending: 100 }, { metrics, logger: quiet, addTimeoutMs: 1_000 });
    const good = [admitted(), admitted()];
    const refused = admitted({ class: 'bulk' as AdmittedRun['class'] });
    for (const r of [good[0]!, refused, good[1]!]) await rows.recordAdmission(r);
    await rows.close(5_000);
    for (const r of good) expect(await store.getRun(r.runId, r.tenantId)).toMatchObject({ status: 'queued' });
    expect(await store.getRun(refused.runId, refused.tenantId)).toBeUndefined();
    expect(await metrics.registry.getSingleMetricAsString('sluice_admission_record_failures_total')).toContain('sluice_admission_record_failures_total 1');
  });

  it('retries a batch while Postgres is unreachable and writes it once it is back', async () => {
    const store = new RunStore(pool);
    let refusals = 2;
    const flaky: Pick<RunStore, 'recordAdmissions' | 'getRun' | 'listEvents'> = {
      recordAdmissions: async (batch) => {
        if (refusals-- > 0) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
        await store.recordAdmissions(batch);
      },
      getRun: (id, tenant) => store.getRun(id, tenant),
      listEvents: (id, tenant, after, limit) => store.listEvents(id, tenant, after, limit),
    };
    const metrics = createMetrics();
    const rows = new AdmissionRows(flaky, { batchSize: 10, maxWaitMs: 0, maxPending: 100 }, { metrics, logger: quiet, addTimeoutMs: 1_000 });
    const run = admitted();
    await rows.recordAdmission(run);
    expect(await rows.getRun(run.runId, run.tenantId)).toMatchObject({ status: 'queued' });
    await rows.close(5_000);
    expect(await store.getRun(run.runId, run.tenantId)).toMatchObject({ status: 'queued' });
    expect(await metrics.registry.getSingleMetricAsString('sluice_admission_rows_write_failures_total')).toContain('sluice_admission_rows_write_failures_total 2');
  });
});
