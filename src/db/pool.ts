import pg from 'pg';
import type { SluiceConfig } from '../config/schema.js';

/** Every connection gets a statement timeout: no query may hold a caller longer than that. */
export function createPool(cfg: SluiceConfig['postgres'], applicationName: string): pg.Pool {
  return new pg.Pool({
    connectionString: cfg.url,
    max: cfg.poolSize,
    connectionTimeoutMillis: 3_000,
    idleTimeoutMillis: 30_000,
    statement_timeout: cfg.statementTimeoutMs,
    query_timeout: cfg.statementTimeoutMs + 1_000,
    application_name: applicationName,
  });
}

/**
 * A connection of its own for LISTEN, outside the pool: the pool would recycle an idle
 * connection and its subscription with it. TCP keep-alive detects a silently dropped connection.
 */
export function createListenClient(cfg: SluiceConfig['postgres'], applicationName: string): pg.Client {
  return new pg.Client({ connectionString: cfg.url, connectionTimeoutMillis: 3_000, keepAlive: true, application_name: applicationName });
}

/**
 * Runs `work` in a transaction on a client checked out of the pool: COMMIT when it resolves,
 * ROLLBACK when it throws. The pool listens for a connection's errors only while it is idle, so
 * a backend that dies while a client is checked out would emit an 'error' nobody handles, and
 * that ends the process; this listens meanwhile, lets the query in flight reject as usual, and
 * destroys a connection that broke (or could not roll back) instead of handing it to the next caller.
 */
export async function inTransaction<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  const onError = (err: Error) => {
    broken = err;
  };
  client.on('error', onError);
  try {
    await client.query('BEGIN');
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch((rollbackErr: Error) => {
      broken ??= rollbackErr;
    });
    throw err;
  } finally {
    client.off('error', onError);
    client.release(broken ?? false);
  }
}
