import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { inTransaction } from '../../../src/db/pool.js';

/** Real Postgres: the pool, the transaction and a backend that dies while a client is checked out. */
describe('inTransaction', () => {
  let pool: pg.Pool;
  let admin: pg.Pool;
  const table = `in_tx_${process.pid}_${Date.now().toString(36)}`;

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: inject('infra').databaseUrl, max: 2 });
    admin = new pg.Pool({ connectionString: inject('infra').databaseUrl, max: 1 });
    await admin.query(`CREATE TABLE ${table} (n int)`);
  });

  afterAll(async () => {
    await admin.query(`DROP TABLE IF EXISTS ${table}`);
    await pool.end();
    await admin.end();
  });

  const count = async () => Number((await admin.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`)).rows[0]!.n);

  it('commits what the work wrote when it resolves, and answers its result', async () => {
    const result = await inTransaction(pool, async (client) => {
      await client.query(`INSERT INTO ${table} VALUES (1)`);
      return 'done';
    });
    expect(result).toBe('done');
    expect(await count()).toBe(1);
  });

  it('rolls back when the work throws, and rethrows its error', async () => {
    const before = await count();
    await expect(
      inTransaction(pool, async (client) => {
        await client.query(`INSERT INTO ${table} VALUES (2)`);
        throw new Error('changed my mind');
      }),
    ).rejects.toThrow('changed my mind');
    expect(await count()).toBe(before);
  });

  it('survives a backend killed while the client is checked out: the work fails, the process does not, the connection is not reused', async () => {
    let killedPid = 0;
    await expect(
      inTransaction(pool, async (client) => {
        killedPid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
        await admin.query('SELECT pg_terminate_backend($1)', [killedPid]);
        // The connection's end arrives while nothing is in flight: an 'error' on the client.
        await new Promise((r) => setTimeout(r, 300));
        await client.query('SELECT 1');
      }),
    ).rejects.toThrow();
    const pids = await Promise.all([0, 1].map(() => pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid').then((r) => r.rows[0]!.pid)));
    expect(pids).not.toContain(killedPid);
    expect(await count()).toBeGreaterThanOrEqual(0);
  });
});
