import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import { writeBackoffMs, writeIsolatingRejects } from '../db/isolated-write.js';
import { ADMITTED_SEQUENCE } from '../runs/status-sequence.js';
import { WriteBehindBatcher } from '../util/write-behind-batcher.js';
import type { AdmittedRun, RunEventView, RunStore, RunView } from './run-store.js';

export interface AdmissionRowsOptions {
  batchSize: number;
  maxWaitMs: number;
  maxPending: number;
}

/** The read-model rows of admitted runs as the API reads them: the store, plus what is still to be written. */
export type RunReads = Pick<RunStore, 'recordAdmission' | 'getRun' | 'listEvents'>;

function admittedView(run: AdmittedRun): RunView {
  return {
    runId: run.runId,
    workflow: run.workflow,
    class: run.class,
    status: 'queued',
    statusMessage: run.message,
    admittedAt: new Date(run.admittedAt).toISOString(),
    deadline: new Date(run.deadline).toISOString(),
    attempts: 0,
  };
}

function admittedEvent(run: AdmittedRun): RunEventView {
  return { runId: run.runId, sequence: ADMITTED_SEQUENCE, status: 'queued', message: run.message, step: null, attempt: 0, occurredAt: new Date(run.admittedAt).toISOString() };
}

/**
 * Takes the admission row off the submit path: `recordAdmission` queues the row (the 202 does not
 * wait for Postgres) and a write-behind batcher inserts many rows per statement. Reads stay
 * read-your-writes: a run whose row is still queued is answered from the queue, as the row will
 * read once written. A row is queued only after Kafka acknowledged its run, so nothing queued ever
 * has to be taken back. A row Postgres refuses for good is logged, counted and left to the status
 * sink, which writes the run's row from its first status event.
 */
export class AdmissionRows implements RunReads {
  private readonly batcher: WriteBehindBatcher<AdmittedRun>;

  constructor(
    private readonly store: Pick<RunStore, 'recordAdmissions' | 'getRun' | 'listEvents'>,
    opts: AdmissionRowsOptions,
    private readonly deps: { metrics: Metrics; logger: Logger; addTimeoutMs: number },
  ) {
    const { metrics, logger } = deps;
    this.batcher = new WriteBehindBatcher<AdmittedRun>({
      key: (run) => run.runId,
      maxBatch: opts.batchSize,
      maxWaitMs: opts.maxWaitMs,
      maxPending: opts.maxPending,
      backoffMs: writeBackoffMs,
      write: (rows) => this.write(rows),
      onWritten: (rows, seconds) => {
        metrics.admissionRowsBatchSize.observe(rows);
        metrics.admissionRowsWriteSeconds.observe(seconds);
      },
      onFailure: (err, attempt, rows, waitMs) => {
        metrics.admissionRowsWriteFailures.inc();
        logger.error({ err, attempt, rows, waitMs }, 'could not write admitted runs\' rows to Postgres; retrying');
      },
      onPending: (n) => metrics.admissionRowsPending.set(n),
    });
  }

  /** Resolves once queued; waits for room while the buffer is full, for at most `addTimeoutMs`. */
  recordAdmission(run: AdmittedRun): Promise<void> {
    return this.batcher.add(run, this.deps.addTimeoutMs);
  }

  async getRun(runId: string, tenantId: string): Promise<RunView | undefined> {
    // Looked up before the query: a row written while the query runs is then found by the query.
    const queued = this.queued(runId, tenantId);
    return (await this.store.getRun(runId, tenantId)) ?? (queued && admittedView(queued));
  }

  async listEvents(runId: string, tenantId: string, afterSequence: number, limit: number): Promise<RunEventView[]> {
    const queued = this.queued(runId, tenantId);
    const events = await this.store.listEvents(runId, tenantId, afterSequence, limit);
    return events.length > 0 || !queued || afterSequence >= ADMITTED_SEQUENCE ? events : [admittedEvent(queued)];
  }

  /** Writes what is queued, retrying until `deadlineMs`; rows still unwritten then are logged (the status sink writes them later). */
  async close(deadlineMs: number): Promise<void> {
    const unwritten = await this.batcher.close(deadlineMs);
    if (unwritten > 0) this.deps.logger.error({ rows: unwritten }, 'admitted runs\' rows not written at shutdown; the status sink writes them from their first status events');
  }

  private queued(runId: string, tenantId: string): AdmittedRun | undefined {
    const run = this.batcher.get(runId);
    return run?.tenantId === tenantId ? run : undefined;
  }

  private async write(rows: readonly AdmittedRun[]): Promise<void> {
    let transient: unknown;
    const written = await writeIsolatingRejects(rows, {
      apply: async (batch) => {
        await this.store.recordAdmissions(batch);
        return [];
      },
      // Waiting out an unavailable Postgres is the batcher's to do (with backoff), with these rows.
      pause: async (p) => {
        transient = p.error;
        return false;
      },
    });
    if (written.outcome === 'abandoned') throw transient;
    for (const { item, error } of written.rejected) {
      this.deps.metrics.admissionRecordFailures.inc();
      this.deps.logger.error({ err: error, runId: item.runId, sqlState: error.sqlState }, 'Postgres refused an admitted run\'s row for good; the status sink writes it from the run\'s first status event');
    }
  }
}
