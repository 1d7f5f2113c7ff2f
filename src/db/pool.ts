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
