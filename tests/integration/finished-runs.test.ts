import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { finishedPointsOf, finishedWindow } from '../../src/api/console/overview.js';
import { migrate } from '../../src/db/migrate.js';
import { readFinishedRuns } from '../../src/status/finished-runs.js';

/** The Overview's finished-run read against the real Postgres, in a schema of its own, over rows finished at known times. */
const schema = `finished_runs_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
let admin: pg.Pool;
let pool: pg.Pool;

beforeAll(async () => {
  const { databaseUrl } = inject('infra');
  admin = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  await admin.query(`CREATE SCHEMA ${schema}`);
  const url = new URL(databaseUrl);
  url.searchParams.set('options', `-c search_path=${schema}`);
  pool = new pg.Pool({ connectionString: url.toString(), max: 4 });
  await migrate(pool);
});

afterAll(async () => {
  await pool?.end();
  await admin?.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await admin?.end();
});

const NOW = Date.UTC(2026, 0, 1, 12, 0, 2);
const window = finishedWindow(NOW, 5_000);
const at = (iso: string) => Date.parse(`2026-01-01T${iso}Z`);

/** A run admitted `waitedSec` before it finished at `finishedAt` (null: still open), its deadline a minute after that unless `lateSec` before. */
async function run(o: { finishedAt: number | null; waitedSec?: number; status?: string; class?: 'interactive' | 'batch'; lateSec?: number; result?: unknown }): Promise<void> {
  const finished = o.finishedAt ?? at('11:59:00');
  await pool.query(
    `INSERT INTO runs (run_id, tenant_id, workflow, class, status, admitted_at, deadline, finished_at, last_sequence, result)
     VALUES ($1, 'tenant-a', 'support-reply', $2, $3, $4, $5, $6, 1000, $7)`,
    [
      randomUUID(),
      o.class ?? 'interactive',
      o.status ?? (o.finishedAt === null ? 'running' : 'completed'),
      new Date(finished - (o.waitedSec ?? 1) * 1000),
      new Date(finished + (o.lateSec === undefined ? 60_000 : -o.lateSec * 1000)),
      o.finishedAt === null ? null : new Date(o.finishedAt),
      o.result === undefined ? null : JSON.stringify(o.result),
    ],
  );
}

describe('readFinishedRuns', () => {
  beforeAll(async () => {
    // The bucket 11:59:50 to 11:59:55: four interactive runs that waited 1 to 4 s (one failed), a batch one that waited 10 s.
    for (const [i, waited] of [1, 2, 3, 4].entries()) await run({ finishedAt: at(`11:59:5${i}.500`), waitedSec: waited, status: waited === 4 ? 'failed' : 'completed' });
    await run({ finishedAt: at('11:59:54.999'), waitedSec: 10, class: 'batch' });
    // The window's first bucket opens at 11:45:00 exactly.
    await run({ finishedAt: at('11:45:00'), waitedSec: 7 });
    // The bucket 11:50:00: completions on time, late (a second after the deadline), and with a stand-in answer.
    await run({ finishedAt: at('11:50:01'), result: { text: 'ok', degraded: false } });
    await run({ finishedAt: at('11:50:02'), lateSec: 1 });
    await run({ finishedAt: at('11:50:03'), result: { text: 'stand-in', degraded: true } });
    // Out of the window: before it, in the bucket still filling, and a run not finished.
    await run({ finishedAt: at('11:44:59.999'), waitedSec: 100 });
    await run({ finishedAt: at('12:00:00'), waitedSec: 100 });
    await run({ finishedAt: null });
  });

  it('counts runs by bucket and status, and takes the percentiles of admission to finish by bucket and class', async () => {
    const rows = await readFinishedRuns(pool, window, 2_000);
    const key = (r: { bucketMs: number; status: string | null; class: string | null }) => `${new Date(r.bucketMs).toISOString().slice(11, 19)} ${r.status ?? r.class}`;
    const byKey = Object.fromEntries(rows.map((r) => [key(r), r]));
    expect(Object.keys(byKey).sort()).toEqual(['11:45:00 completed', '11:45:00 interactive', '11:50:00 completed', '11:50:00 interactive', '11:59:50 batch', '11:59:50 completed', '11:59:50 failed', '11:59:50 interactive']);
    expect(byKey['11:59:50 completed']).toMatchObject({ runs: 4, onTime: 4 });
    expect(byKey['11:59:50 failed']).toMatchObject({ runs: 1, onTime: 0 });
    // Late, or with a stand-in answer: completed, not on time.
    expect(byKey['11:50:00 completed']).toMatchObject({ runs: 3, onTime: 1 });
    expect(byKey['11:59:50 interactive']).toMatchObject({ runs: 4, p50: 2.5 });
    // Continuous: 99% of the way from the lowest to the highest of 1, 2, 3, 4 s.
    expect(byKey['11:59:50 interactive']!.p99).toBeCloseTo(3.97, 6);
    expect(byKey['11:59:50 batch']).toMatchObject({ runs: 1, p50: 10, p99: 10 });
    expect(byKey['11:45:00 interactive']).toMatchObject({ runs: 1, p50: 7, p99: 7 });
  });

  it('gives the Overview a point per bucket of the 15 minutes, the last one ending where the filling bucket starts', async () => {
    const points = finishedPointsOf(await readFinishedRuns(pool, window, 2_000), window);
    expect(points).toHaveLength(180);
    expect(points[0]).toEqual({ at: at('11:45:05'), finished: { completed: 0.2, failed: 0 }, onTime: 0.2, p50: { interactive: 7, batch: null }, p99: { interactive: 7, batch: null } });
    expect(points.at(-1)).toMatchObject({ at: at('12:00:00'), finished: { completed: 0, failed: 0 }, p50: { interactive: null, batch: null } });
    expect(points.at(-2)).toMatchObject({ at: at('11:59:55'), finished: { completed: 0.8, failed: 0.2 }, onTime: 0.8, p50: { interactive: 2.5, batch: 10 } });
  });

  it('gives up after its statement timeout when Postgres does not answer', async () => {
    const locker = await pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE runs IN ACCESS EXCLUSIVE MODE');
      const started = Date.now();
      await expect(readFinishedRuns(pool, window, 300)).rejects.toThrow(/statement timeout/);
      expect(Date.now() - started).toBeLessThan(2_000);
    } finally {
      await locker.query('ROLLBACK');
      locker.release();
    }
  });

  it('reads through the finished_at index rather than the whole table', async () => {
    const client = await pool.connect();
    try {
      // Too few rows for the planner to prefer an index on its own: the test asks whether it can use one.
      await client.query('SET enable_seqscan = off');
      const { rows } = await client.query<{ 'QUERY PLAN': string }>('EXPLAIN SELECT count(*) FROM runs WHERE finished_at >= $1 AND finished_at < $2', [new Date(window.fromMs), new Date(window.toMs)]);
      expect(rows.map((r) => r['QUERY PLAN']).join('\n')).toMatch(/runs_finished/);
    } finally {
      await client.query('RESET enable_seqscan');
      client.release();
    }
  });
});
