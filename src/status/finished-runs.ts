import type { Pool } from 'pg';
import { inTransaction } from '../db/pool.js';

/** Runs whose finished_at falls in [fromMs, toMs), counted in buckets of `bucketMs` from the epoch. */
export interface FinishedWindow {
  fromMs: number;
  toMs: number;
  bucketMs: number;
}

/**
 * One bucket's runs of one status (`class` null) or of one class (`status` null), with the
 * 50th and 99th percentiles of their seconds from admission to finish (continuous, interpolated),
 * and how many of them completed on time: a real answer (not `result.degraded`) by the deadline.
 */
export interface FinishedRunsRow {
  /** The bucket's start, epoch ms. */
  bucketMs: number;
  status: string | null;
  class: string | null;
  runs: number;
  onTime: number;
  p50: number;
  p99: number;
}

/**
 * The runs that finished in `window`, by bucket and status and by bucket and class, in one
 * statement over `runs_finished` (finished_at), cut off after `timeoutMs`. Every terminal status
 * counts, and admission to finish is what a caller waited: queueing, attempts and retries.
 */
export async function readFinishedRuns(pool: Pool, window: FinishedWindow, timeoutMs: number): Promise<FinishedRunsRow[]> {
  return inTransaction(pool, async (client) => {
    await client.query(`SELECT set_config('statement_timeout', $1, true)`, [String(timeoutMs)]);
    const { rows } = await client.query<{ bucket_ms: number; status: string | null; class: string | null; runs: number; on_time: number; p50: number; p99: number }>(
      `WITH f AS (
         SELECT (floor(extract(epoch FROM finished_at) * 1000 / $3) * $3)::float8 AS bucket_ms, status, class,
                extract(epoch FROM finished_at - admitted_at)::float8 AS seconds,
                status = 'completed' AND finished_at <= deadline AND coalesce(result->>'degraded', 'false') <> 'true' AS on_time
           FROM runs
          WHERE finished_at >= $1 AND finished_at < $2
       )
       SELECT bucket_ms, status, class, count(*)::int AS runs, (count(*) FILTER (WHERE on_time))::int AS on_time,
              percentile_cont(0.5) WITHIN GROUP (ORDER BY seconds) AS p50,
              percentile_cont(0.99) WITHIN GROUP (ORDER BY seconds) AS p99
         FROM f
        GROUP BY GROUPING SETS ((bucket_ms, status), (bucket_ms, class))
        ORDER BY bucket_ms`,
      [new Date(window.fromMs), new Date(window.toMs), window.bucketMs],
    );
    return rows.map((r) => ({ bucketMs: r.bucket_ms, status: r.status, class: r.class, runs: r.runs, onTime: r.on_time, p50: r.p50, p99: r.p99 }));
  });
}
