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
