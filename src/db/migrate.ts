import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Pool } from 'pg';
import { packageRoot } from '../util/package-root.js';
import { inTransaction } from './pool.js';

/** Arbitrary constant: serializes migrations when several roles/instances start together. */
const MIGRATION_LOCK = 7_142_001;

/**
 * Applies `migrations/NNN_name.sql` files in order, each once, inside one transaction holding an
 * advisory lock, so concurrent start-ups neither race nor half-apply a file.
 */
export async function migrate(pool: Pool, dir: string = join(packageRoot(), 'migrations')): Promise<string[]> {
  const files = readdirSync(dir).filter((f) => /^\d{3}_[\w-]+\.sql$/.test(f)).sort();
  return inTransaction(pool, async (client) => {
    await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    await client.query('CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())');
    const done = new Set((await client.query<{ name: string }>('SELECT name FROM schema_migrations')).rows.map((r) => r.name));
    const applied: string[] = [];
    for (const file of files) {
      if (done.has(file)) continue;
      await client.query(readFileSync(join(dir, file), 'utf8'));
      await client.query('INSERT INTO schema_migrations (name) VALUES ($1)', [file]);
      applied.push(file);
    }
    return applied;
  });
}
