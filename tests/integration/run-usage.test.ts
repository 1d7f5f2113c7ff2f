import { spawnSync } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import type { RunStatusChanged } from '../../src/events/schemas.js';
import { RunStore } from '../../src/status/run-store.js';
import type { RunUsage } from '../../src/status/run-usage.js';
import { usageByWorkflow } from '../../src/status/usage-report.js';
import { packageRoot } from '../../src/util/package-root.js';
import { testNamespace, writeTestConfig } from './harness.js';

/** run_usage against the real Postgres, in a schema of its own: the migration, the sink's writes, the API's read, `sluice usage`. */
const schema = `run_usage_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
const namespace = testNamespace('usage');
const cli = join(packageRoot(), 'dist', 'cli', 'main.js');
let admin: pg.Pool;
let pool: pg.Pool;
let url: URL;
let store: RunStore;

beforeAll(async () => {
  const { databaseUrl } = inject('infra');
  admin = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  await admin.query(`CREATE SCHEMA ${schema}`);
  url = new URL(databaseUrl);
  url.searchParams.set('options', `-c search_path=${schema}`);
  pool = new pg.Pool({ connectionString: url.toString(), max: 4 });
  await migrate(pool);
  store = new RunStore(pool, { namespace });
});

afterAll(async () => {
  await pool?.end();
  await admin?.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await admin?.end();
});

const HOUR = 3_600_000;
const priced = (inputTokens: number, costUsd: number | null): RunUsage => {
  const tokens = { inputTokens, outputTokens: 10, cacheCreationInputTokens: 5, cacheReadInputTokens: 100, llmCalls: 2, costUsd };
  return { ...tokens, byModel: { 'claude-sonnet-4-6': tokens } };
};

/** A run admitted and completed `agoMs` ago with `usage` in its result (none: a result without usage). */
async function completedRun(opts: { tenantId?: string; workflow?: string; agoMs?: number; usage?: RunUsage; runStore?: RunStore }): Promise<RunStatusChanged> {
  const runId = randomUUID();
  const tenantId = opts.tenantId ?? 'tenant-a';
  const workflow = opts.workflow ?? 'support-reply';
  const at = Date.now() - (opts.agoMs ?? 60_000);
  const runs = opts.runStore ?? store;
  await runs.recordAdmission({ runId, tenantId, workflow, class: 'interactive', admittedAt: at - 1_000, deadline: at + 30_000, message: 'queued' });
  const event: RunStatusChanged = {
    runId,
    tenantId,
    workflow,
    class: 'interactive',
    admittedAt: at - 1_000,
    deadline: at + 30_000,
    attempt: 1,
    traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    sequence: 1_000,
    status: 'completed',
    occurredAt: at,
    message: 'completed',
    step: null,
    result: JSON.stringify({ text: 'ok', degraded: false, steps: [], ...(opts.usage ? { usage: opts.usage } : {}) }),
    error: null,
    attemptStartedAt: at - 500,
  };
  await runs.applyStatusEvents([event]);
  return event;
}

const usageRows = async (runId: string) => (await pool.query('SELECT * FROM run_usage WHERE run_id = $1', [runId])).rows;

describe('the run_usage migration', () => {
  it('is applied once and its SQL can run again', async () => {
    expect(await migrate(pool)).toEqual([]);
    await pool.query(readFileSync(join(packageRoot(), 'migrations', '004_run_usage.sql'), 'utf8'));
    const { rows } = await pool.query<{ name: string }>('SELECT name FROM schema_migrations ORDER BY name');
    expect(rows.map((r) => r.name)).toContain('004_run_usage.sql');
  });
});

describe('RunStore and run_usage', () => {
  it('stores a completed run\'s usage with its terminal event, and GET shows it', async () => {
    const usage = priced(1_000, 0.0123);
    const event = await completedRun({ usage });
    const rows = await usageRows(event.runId);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ namespace, tenant_id: 'tenant-a', workflow: 'support-reply', class: 'interactive', llm_calls: 2, input_tokens: '1000', cost_usd: '0.0123' });
    expect(rows[0].finished_at.getTime()).toBe(event.occurredAt);
    const view = await store.getRun(event.runId, 'tenant-a');
    expect(view?.usage).toEqual(usage);
    expect(view?.result).toMatchObject({ usage });
  });

  it('keeps one row under redelivery, in one batch or in another', async () => {
    const event = await completedRun({ usage: priced(1_000, 0.01) });
    const again = { ...event, result: JSON.stringify({ usage: priced(9_999, 9) }) };
    await store.applyStatusEvents([again, again]);
    const rows = await usageRows(event.runId);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ input_tokens: '1000', cost_usd: '0.01' });
  });

  it('stores an unknown cost as NULL, never 0', async () => {
    const event = await completedRun({ usage: priced(1_000, null) });
    expect((await usageRows(event.runId))[0]).toMatchObject({ cost_usd: null });
    expect((await store.getRun(event.runId, 'tenant-a'))?.usage?.costUsd).toBeNull();
  });

  it('stores nothing for a result without usage (an older processor) and GET shows no usage', async () => {
    const event = await completedRun({});
    expect(await usageRows(event.runId)).toEqual([]);
    const view = await store.getRun(event.runId, 'tenant-a');
    expect(view?.status).toBe('completed');
    expect(view && 'usage' in view).toBe(false);
  });
});

describe('usage by tenant and workflow', () => {
  const mine = 'tenant-sum';

  beforeAll(async () => {
    await completedRun({ tenantId: mine, usage: priced(1_000, 0.5) });
    await completedRun({ tenantId: mine, usage: priced(2_000, 0.25) });
    await completedRun({ tenantId: mine, usage: priced(4_000, null) });
    await completedRun({ tenantId: mine, workflow: 'report-digest', usage: priced(8_000, 1) });
    // Outside the window, and another namespace's run in the same database.
    await completedRun({ tenantId: mine, agoMs: 3 * HOUR, usage: priced(16_000, 2) });
    await completedRun({ tenantId: mine, usage: priced(32_000, 4), runStore: new RunStore(pool, { namespace: `${namespace}other.` }) });
  });

  it('sums the runs completed in the window, per workflow, known costs only, counting the unpriced runs', async () => {
    const rows = await usageByWorkflow(pool, { namespace, since: new Date(Date.now() - HOUR), tenantId: mine });
    expect(rows).toEqual([
      { tenantId: mine, workflow: 'report-digest', runs: 1, llmCalls: 2, inputTokens: 8_000, outputTokens: 10, cacheCreationInputTokens: 5, cacheReadInputTokens: 100, costUsd: 1, unpricedRuns: 0 },
      { tenantId: mine, workflow: 'support-reply', runs: 3, llmCalls: 6, inputTokens: 7_000, outputTokens: 30, cacheCreationInputTokens: 15, cacheReadInputTokens: 300, costUsd: 0.75, unpricedRuns: 1 },
    ]);
  });

  it('widens with the window and covers every tenant without a filter', async () => {
    const wide = await usageByWorkflow(pool, { namespace, since: new Date(Date.now() - 4 * HOUR), tenantId: mine });
    expect(wide.find((r) => r.workflow === 'support-reply')).toMatchObject({ runs: 4, inputTokens: 23_000, costUsd: 2.75 });
    const all = await usageByWorkflow(pool, { namespace, since: new Date(Date.now() - HOUR) });
    expect(new Set(all.map((r) => r.tenantId))).toEqual(new Set(['tenant-a', mine]));
  });

  describe('sluice usage, run as an operator would', () => {
    const usage = (...args: string[]) => {
      const env = { ...process.env, SLUICE_CONFIG: writeTestConfig(), DATABASE_URL: url.toString(), SLUICE_NAMESPACE: namespace };
      return spawnSync(process.execPath, [cli, 'usage', ...args], { encoding: 'utf8', env, timeout: 30_000 });
    };

    beforeAll(() => {
      if (!existsSync(cli)) throw new Error(`${cli} is missing: run \`npm run build\` first`);
    });

    it('prints the window as JSON', () => {
      const r = usage('--since', '1h', '--tenant', mine, '--json');
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      const out = JSON.parse(r.stdout);
      expect(out.tenantId).toBe(mine);
      expect(out.workflows.map((w: { workflow: string }) => w.workflow)).toEqual(['report-digest', 'support-reply']);
      expect(out.total).toMatchObject({ runs: 4, inputTokens: 15_000, costUsd: 1.75, unpricedRuns: 1 });
    });

    it('prints a table with the total', () => {
      const r = usage('--since', '1d', '--tenant', mine);
      expect(r.status).toBe(0);
      expect(r.stdout).toMatch(/^tenant-sum\s+support-reply\s+4\s+8\s+23,000\s/m);
      expect(r.stdout).toMatch(/^total\s+5\s+10\s+31,000\s+50\s+25\s+500\s+3\.7500\s+1$/m);
      expect(r.stdout).toContain('UNPRICED RUNS used a model no pricing entry matches');
    });

    it('refuses a --since it cannot read, exit 2', () => {
      const r = usage('--since', 'yesterday');
      expect(r.status).toBe(2);
      expect(r.stderr).toContain("option '--since <when>' argument 'yesterday' is invalid");
      expect(r.stderr).toContain('a duration ago such as 30m, 2h, 7d');
    });
  });
});
