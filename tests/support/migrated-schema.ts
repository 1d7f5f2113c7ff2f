import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { migrate } from '../../src/db/migrate.js';

export interface MigratedSchema {
  /** A pool whose search_path is the schema: the tables Sluice migrates, empty. */
  pool: pg.Pool;
  /** Drops the schema and closes both pools. */
  close: () => Promise<void>;
}

/**
 * A Postgres schema of the test file's own, migrated, so a file's rows are never another's and
 * dropping it leaves nothing behind.
 */
export async function openMigratedSchema(databaseUrl: string, label: string, maxConnections = 4): Promise<MigratedSchema> {
  const schema = `${label}_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
  const admin = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  await admin.query(`CREATE SCHEMA ${schema}`);
  const pool = new pg.Pool({ connectionString: databaseUrl, options: `-c search_path=${schema}`, max: maxConnections });
  await migrate(pool);
  return {
    pool,
    close: async () => {
      await pool.end();
      await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await admin.end();
    },
  };
}
