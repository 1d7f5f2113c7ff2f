import { createServer, type Server, type Socket } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { classifyWriteFailure } from '../../src/db/postgres-error.js';
import { freePort } from './harness.js';

/** The classifier against the errors the real driver and server raise, not hand-made ones. */
const failureOf = async (run: () => Promise<unknown>): Promise<unknown> => {
  try {
    await run();
  } catch (err) {
    return err;
  }
  throw new Error('expected a failure');
};

describe('classifyWriteFailure on real failures', () => {
  let pool: pg.Pool;

  beforeAll(() => {
    pool = new pg.Pool({ connectionString: inject('infra').databaseUrl, max: 3 });
  });

  afterAll(async () => {
    await pool?.end();
  });

  it.each<[string, string, unknown[]]>([
    ['a \\u0000 escape in jsonb (22P05)', 'SELECT $1::jsonb', [JSON.stringify({ m: '\u0000' })]],
    ['a lone surrogate escape in jsonb (22P02)', 'SELECT $1::jsonb', [JSON.stringify({ m: '\ud800' })]],
    ['a NUL in text (22021)', 'SELECT $1::text', ['\u0000']],
    ['a time before 4713 BC (22008)', 'SELECT $1::timestamptz', [new Date(-2.2e14)]],
    ['no UUID (22P02)', 'SELECT $1::uuid', ['not-a-uuid']],
    ['JSON nested too deep (54001)', 'SELECT $1::jsonb', ['['.repeat(200_000) + ']'.repeat(200_000)]],
  ])('%s is a data error', async (_what, sql, params) => {
    expect(classifyWriteFailure(await failureOf(() => pool.query(sql, params)))).toBe('data');
  });

  it('a missing table is permanent, not blamed on the data', async () => {
    expect(classifyWriteFailure(await failureOf(() => pool.query('INSERT INTO no_such_table_for_sinks VALUES (1)')))).toBe('permanent');
  });

  it('a statement timeout is transient', async () => {
    const client = await pool.connect();
    try {
      await client.query('SET statement_timeout = 50');
      expect(classifyWriteFailure(await failureOf(() => client.query('SELECT pg_sleep(2)')))).toBe('transient');
    } finally {
      await client.query('RESET statement_timeout');
      client.release();
    }
  });

  it('a connection the server terminates is transient', async () => {
    const victim = new pg.Client({ connectionString: inject('infra').databaseUrl });
    victim.on('error', () => undefined);
    await victim.connect();
    const { rows } = await victim.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const running = failureOf(() => victim.query('SELECT pg_sleep(10)'));
    await new Promise((r) => setTimeout(r, 200));
    await pool.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
    expect(classifyWriteFailure(await running)).toBe('transient');
    expect(classifyWriteFailure(await failureOf(() => victim.query('SELECT 1')))).toBe('transient');
    await victim.end().catch(() => undefined);
  });

  it('nothing listening is transient', async () => {
    const url = new URL(inject('infra').databaseUrl);
    url.hostname = '127.0.0.1';
    url.port = String(await freePort());
    const nobody = new pg.Pool({ connectionString: url.toString(), connectionTimeoutMillis: 1_000 });
    try {
      expect(classifyWriteFailure(await failureOf(() => nobody.query('SELECT 1')))).toBe('transient');
    } finally {
      await nobody.end();
    }
  });

  it('a server that accepts and never answers is transient (the pool gives up connecting)', async () => {
    const sockets = new Set<Socket>();
    const silent: Server = createServer((s) => sockets.add(s));
    const port = await freePort();
    await new Promise<void>((resolve) => silent.listen(port, '127.0.0.1', resolve));
    const url = new URL(inject('infra').databaseUrl);
    url.hostname = '127.0.0.1';
    url.port = String(port);
    const stuck = new pg.Pool({ connectionString: url.toString(), connectionTimeoutMillis: 300 });
    try {
      expect(classifyWriteFailure(await failureOf(() => stuck.query('SELECT 1')))).toBe('transient');
    } finally {
      await stuck.end();
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });
});
