import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { groupId, topicNames } from '../../src/kafka/topics.js';
import { packageRoot } from '../../src/util/package-root.js';
import { launchChromium } from '../support/chromium.js';
import { ADMIN_KEY, TENANT_A_KEY, TENANT_B_KEY, TENANT_C_KEY, eventually, freePort, http, startSluice, testNamespace, waitForStatus, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * Where the pages' screenshots go: a fresh temporary directory, unless SLUICE_UPDATE_SCREENSHOTS=1
 * asks for the README's own in docs/console (so a test run leaves the tracked images alone).
 */
const SCREENSHOTS = process.env.SLUICE_UPDATE_SCREENSHOTS === '1' ? join(packageRoot(), 'docs', 'console') : mkdtempSync(join(tmpdir(), 'sluice-console-screenshots-'));
/** Every browser wait is bounded: a broken page fails the test in seconds, not at the suite's timeout. */
const UI_TIMEOUT_MS = 20_000;

/**
 * The console in a real headless chromium against a whole Sluice (simulator, status sink, lag
 * monitor and API in one process, the processor in its own, so it can be stopped and started):
 * logging in, being refused, live data on the pages, lag appearing while the processors are
 * stopped and clearing when they start, a limit changed from the page holding for the next run,
 * and a run cancelled from the page.
 */
describe('the operations console in a browser', () => {
  const namespace = testNamespace('console');
  let sluice: SluiceProcess;
  let processor: SluiceProcess;
  let configPath: string;
  let browser: BrowserContext;
  let page: Page;
  let api: string;
  let sim: string;

  const submit = (key: string, input: unknown, deadlineMs = 60_000) => http(`${api}/v1/runs`, { method: 'POST', key, json: { workflow: 'support-reply', input, deadlineMs } });
  const startProcessor = async () => startSluice({ configPath, roles: 'processor', namespace, env: { SLUICE_OPS_PORT: String(await freePort()) } });
  const shot = (name: string) => page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
  const logIn = async (key: string) => {
    await page.fill('input[name=key]', key);
    await page.click('button[type=submit]');
  };

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    configPath = writeTestConfig({
      api: { port: apiPort, console: { sampleMs: 1_000 } },
      simulator: { port: simPort, anthropicLatencyMs: 100, anthropicJitterMs: 20 },
      lagMonitor: { intervalMs: 1_000, windowMs: 10_000 },
      kafka: { sessionTimeoutMs: 6_000, heartbeatIntervalMs: 1_000 },
      processor: { shutdownGraceMs: 1_000 },
    });
    sluice = await startSluice({ configPath, roles: 'provider-sim,status-sink,dlq-sink,lag-monitor,api', namespace });
    processor = await startProcessor();
    api = `http://127.0.0.1:${apiPort}`;
    sim = `http://127.0.0.1:${simPort}`;
    mkdirSync(SCREENSHOTS, { recursive: true });
    browser = await launchChromium();
    page = await browser.newPage();
    page.setDefaultTimeout(UI_TIMEOUT_MS);
  });

  afterAll(async () => {
    await browser?.close();
    await processor?.stop();
    await sluice?.stop();
  });

  it('refuses a tenant key and an unknown key, and serves no data without a session', async () => {
    await page.goto(`${api}/console`);
    await logIn(TENANT_A_KEY);
    await expect.poll(() => page.textContent('[data-testid=login-error]'), { timeout: UI_TIMEOUT_MS }).toContain('tenant keys do not open it');
    await logIn('not-a-key');
    await expect.poll(() => page.textContent('[data-testid=login-error]'), { timeout: UI_TIMEOUT_MS }).toBe('unknown key');
    const status = await page.evaluate(async () => (await fetch('/console/api/overview')).status);
    expect(status).toBe(401);
    // Nor does the API's own Bearer scheme open it, with the admin key or a tenant's.
    for (const key of [ADMIN_KEY, TENANT_A_KEY]) expect((await http(`${api}/console/api/overview`, { key })).status).toBe(401);
    await shot('login');
  });

  it('logs in with the admin key and shows live counts on the Overview', async () => {
    await logIn(ADMIN_KEY);
    await page.waitForSelector('[data-testid=figures]');
    const runs = await Promise.all(Array.from({ length: 6 }, (_, i) => submit(TENANT_A_KEY, { message: `order ${i}` })));
    expect(runs.map((r) => r.status)).toEqual(Array(6).fill(202));
    // The figures and charts refresh on their own: the admissions show up without a reload.
    const admitted = page.locator('.figures div', { hasText: 'admitted' }).locator('dd');
    await expect.poll(() => admitted.textContent(), { timeout: UI_TIMEOUT_MS }).toMatch(/^[1-9.][\d.]*\/s$|^0\.\d*[1-9]\d*\/s$/);
    for (const r of runs) await waitForStatus(api, r.body.runId, TENANT_A_KEY, ['completed']);
    await page.waitForSelector('.chart .u-over');
    await page.waitForTimeout(2_000);
    await shot('overview');
  });

  it('shows lag on Backpressure appear while the processors are stopped, and clear when they start, without a reload', async () => {
    await page.click('a[href="#/backpressure"]');
    await page.waitForSelector('[data-testid=lag] tbody tr');
    // A mark in the page's own memory: a reload would lose it.
    await page.evaluate(() => ((globalThis as unknown as { consoleMark: number }).consoleMark = 1));
    const rows = page.locator(`[data-testid=lag] tr[data-group="${groupId(namespace, 'processor')}"][data-topic="${topicNames(namespace).interactive}"]`);
    const worst = async () => {
      const cells = await rows.evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent ?? '')));
      // Columns: group, topic, partition, lag (messages), lag (time), status.
      const lagging = cells.filter((c) => Number(c[3]) > 0);
      return { messages: lagging.reduce((sum, c) => sum + Number(c[3]), 0), time: lagging.map((c) => c[4]), statuses: [...new Set(cells.map((c) => c[5]))].sort() };
    };
    expect(await processor.stop()).toBe(0);
    const stranded = await Promise.all(Array.from({ length: 5 }, (_, i) => submit(TENANT_A_KEY, { message: `stranded ${i}` }, 120_000)));
    expect(stranded.map((r) => r.status)).toEqual(Array(5).fill(202));
    // The lag monitor polls every second: the page's next refreshes show the runs waiting, in messages and time, and the partition's status leaves OK.
    await expect.poll(async () => (await worst()).messages, { timeout: 30_000 }).toBe(5);
    await expect.poll(async () => (await worst()).statuses.some((s) => ['WARN', 'STALL', 'STOP'].includes(s)), { timeout: 30_000 }).toBe(true);
    expect((await worst()).time.every((t) => /^\d/.test(t) && t !== '0 ms')).toBe(true);
    await page.waitForSelector(`text=${groupId(namespace, 'processor')} (0 members`);
    await shot('backpressure-lag');
    processor = await startProcessor();
    for (const r of stranded) await waitForStatus(api, r.body.runId, TENANT_A_KEY, ['completed'], 60_000);
    await expect.poll(async () => worst(), { timeout: 30_000 }).toEqual({ messages: 0, time: [], statuses: ['OK'] });
    expect(await page.evaluate(() => (globalThis as unknown as { consoleMark?: number }).consoleMark)).toBe(1);
  });

  it('shows permits on Backpressure, and a limit changed there holds for the next run', async () => {
    await page.click('a[href="#/backpressure"]');
    await page.waitForSelector('[data-testid=lag] tbody tr');
    await page.waitForSelector('tr[data-scope="tenant:tenant-b"]');
    // The processor runs in a process of its own here: its waiters reach the page through Redis.
    const oldest = (scope: string) => page.textContent(`tr[data-scope="${scope}"] td.oldest`);
    await expect.poll(() => oldest('global'), { timeout: UI_TIMEOUT_MS }).toBe('none waiting');
    await page.waitForSelector('[data-testid=waiting-dependency] >> text=none');
    // Nothing paused or held in any processor, though none runs in the API's process.
    await page.waitForSelector('[data-testid=paused] >> text=none');
    await page.waitForSelector('[data-testid=held] >> text=none');
    // tenant-b to 0 concurrent runs, from the page.
    await page.click('[data-testid="edit-tenant:tenant-b"]');
    await page.fill('[data-testid="limit-tenant:tenant-b"]', '0');
    await page.click('tr[data-scope="tenant:tenant-b"] button[type=submit]');
    await page.waitForSelector('tr[data-scope="tenant:tenant-b"] >> text=(configured');
    const limits = await http(`${api}/v1/admin/limits`, { key: ADMIN_KEY });
    expect(limits.body.limits).toContainEqual(expect.objectContaining({ scope: 'tenant', name: 'tenant-b', limit: 0, override: 0 }));
    // So a tenant-b run waits while a tenant-a run goes through...
    const held = await submit(TENANT_B_KEY, { message: 'held' });
    const free = await submit(TENANT_A_KEY, { message: 'free' });
    await waitForStatus(api, free.body.runId, TENANT_A_KEY, ['completed']);
    expect((await http(`${api}/v1/runs/${held.body.runId}`, { key: TENANT_B_KEY })).body.status).toBe('queued');
    // ...and shows as the oldest waiter of every scope it needs, once its processor published it, and of no other.
    for (const scope of ['tenant:tenant-b', 'global', 'workflow:support-reply']) await expect.poll(() => oldest(scope), { timeout: UI_TIMEOUT_MS }).toMatch(/^\d[\d.]* (ms|s)$/);
    expect(await oldest('tenant:tenant-a')).toBe('none waiting');
    await shot('backpressure');
    // ...until the limit is raised again, from the page.
    await page.click('[data-testid="edit-tenant:tenant-b"]');
    await page.fill('[data-testid="limit-tenant:tenant-b"]', '2');
    await page.click('tr[data-scope="tenant:tenant-b"] button[type=submit]');
    await waitForStatus(api, held.body.runId, TENANT_B_KEY, ['completed']);
    await expect.poll(() => oldest('tenant:tenant-b'), { timeout: UI_TIMEOUT_MS }).toBe('none waiting');
  });

  it('shows a breaker opened by the simulator on Dependencies as it happens, and forces it closed and open from the page', async () => {
    const state = page.locator('[data-testid=breaker-state-anthropic]');
    const breakerOfAdminApi = async () => ((await http(`${api}/v1/admin/breakers`, { key: ADMIN_KEY })).body.breakers as { dependency: string; state: string; forced: { mode: string } | null }[]).find((b) => b.dependency === 'anthropic')!;
    const confirm = async (action: string) => {
      await page.click(`[data-testid=${action}-anthropic]`);
      await page.waitForSelector('[data-testid=force-confirm]');
      await page.click('[data-testid=force-confirm-yes]');
    };
    await page.click('a[href="#/dependencies"]');
    await expect.poll(() => state.textContent(), { timeout: UI_TIMEOUT_MS }).toBe('closed');

    // Every LLM call fails: a handful of runs trips the breaker, and the page shows it without a reload.
    expect((await http(`${sim}/admin/faults`, { method: 'PUT', key: ADMIN_KEY, json: { target: 'anthropic', errorStatus: 500, errorRate: 1 } })).status).toBe(200);
    const failing = await Promise.all(Array.from({ length: 6 }, (_, i) => submit(TENANT_A_KEY, { message: `failing ${i}` })));
    expect(failing.map((r) => r.status)).toEqual(Array(6).fill(202));
    await expect.poll(() => state.textContent(), { timeout: 30_000 }).toBe('open');
    expect((await breakerOfAdminApi()).state).toBe('open');

    // Forced closed from the page, after its confirmation: calls go through although the breaker itself is
    // open, and their failures fill the window the page shows without tripping anything.
    await confirm('force-closed');
    await expect.poll(() => state.textContent(), { timeout: UI_TIMEOUT_MS }).toBe('forced closed');
    expect(await breakerOfAdminApi()).toMatchObject({ state: 'open', forced: { mode: 'closed' } });
    const drilled = await Promise.all(Array.from({ length: 2 }, (_, i) => submit(TENANT_A_KEY, { message: `drill ${i}` })));
    await expect.poll(() => page.locator('tr[data-dependency=anthropic] .gauge').first().textContent(), { timeout: UI_TIMEOUT_MS }).toMatch(/\([1-9]\d* of [1-9]\d*\)/);
    await shot('dependencies');
    await http(`${sim}/admin/faults`, { method: 'DELETE', key: ADMIN_KEY });
    const through = await submit(TENANT_A_KEY, { message: 'through a forced-closed breaker' });
    const done = await waitForStatus(api, through.body.runId, TENANT_A_KEY, ['completed'], 30_000);
    expect(done.result).toMatchObject({ degraded: false });

    // Forced open: the admin API reports it, and the API refuses an interactive run at the door (the force outlasts its deadline).
    await confirm('force-open');
    await expect.poll(() => state.textContent(), { timeout: UI_TIMEOUT_MS }).toBe('forced open');
    expect((await breakerOfAdminApi()).forced).toMatchObject({ mode: 'open' });
    const refused = await submit(TENANT_A_KEY, { message: 'into a forced-open breaker' });
    expect(refused.status).toBe(503);
    expect(refused.body).toMatchObject({ code: 'dependency_unavailable' });
    const audited = await eventually(
      async () => {
        const lines = sluice.logs.filter((l) => (l.audit as { action?: string } | undefined)?.action === 'breaker.force').map((l) => l.audit);
        return lines.length >= 2 ? lines : undefined;
      },
      5_000,
      'the audit lines of the forces',
    );
    expect(audited).toEqual([expect.objectContaining({ outcome: 'done', dependency: 'anthropic', mode: 'closed' }), expect.objectContaining({ outcome: 'done', dependency: 'anthropic', mode: 'open' })]);

    // Cleared from the page: the breaker decides again, and probes close it for the tests after this one.
    await confirm('clear');
    await expect.poll(async () => (await breakerOfAdminApi()).forced).toBeNull();
    await eventually(
      async () => {
        await waitForStatus(api, (await submit(TENANT_A_KEY, { message: 'probe' })).body.runId, TENANT_A_KEY, ['completed'], 30_000);
        return (await breakerOfAdminApi()).state === 'closed' ? true : undefined;
      },
      30_000,
      'the breaker to close again',
      200,
    );
    await expect.poll(() => state.textContent(), { timeout: UI_TIMEOUT_MS }).toBe('closed');
    // The runs of the fault are over too (retried, or answered by the fallback) before the next test.
    for (const r of [...failing, ...drilled]) await waitForStatus(api, r.body.runId, TENANT_A_KEY, ['completed', 'failed', 'dead_lettered'], 60_000);
  });

  it('finds a run, shows its timeline, and cancels a running one after a confirmation', async () => {
    // The tool step takes 8 s, so the run is still running when the page cancels it.
    expect((await http(`${sim}/admin/faults`, { method: 'PUT', key: ADMIN_KEY, json: { target: 'order-lookup', latencyMs: 8_000 } })).status).toBe(200);
    const slow = await submit(TENANT_A_KEY, { message: 'Where is order 7?' });
    await waitForStatus(api, slow.body.runId, TENANT_A_KEY, ['running']);
    await page.click('a[href="#/runs"]');
    await page.fill('input[name=runId]', slow.body.runId);
    await page.click('form.filters button[type=submit]');
    await page.click(`a[href="#/runs/${slow.body.runId}"]`);
    await page.waitForSelector('[data-testid=timeline] li');
    await page.click('[data-testid=cancel-run]');
    await page.click('[data-testid=confirm-cancel]');
    await page.waitForSelector('text=cancellation requested');
    await waitForStatus(api, slow.body.runId, TENANT_A_KEY, ['cancelled'], 30_000);
    await page.waitForSelector('[data-testid=run-status] >> text=cancelled');
    await http(`${sim}/admin/faults`, { method: 'PUT', key: ADMIN_KEY, json: { target: 'order-lookup', latencyMs: 0 } });
    await shot('runs');
    const audit = await eventually(async () => sluice.logs.find((l) => (l.audit as { action?: string } | undefined)?.action === 'run.cancel'), 5_000, 'the audit line of the cancel');
    expect(audit.audit).toMatchObject({ outcome: 'done', runId: slow.body.runId, tenant: 'tenant-a' });
  });

  it('replays a dead letter from the DLQ page, after a dry run, and the run completes', async () => {
    // tenant-c may run nothing, so its batch run's deadline passes while it waits: it is dead-lettered as expired.
    const limit = (n: number) => http(`${api}/v1/admin/limits`, { method: 'PUT', key: ADMIN_KEY, json: { scope: 'tenant', name: 'tenant-c', limit: n } });
    expect((await limit(0)).status).toBe(200);
    const doomed = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_C_KEY, json: { workflow: 'support-reply', input: { message: 'Where is order 9?' }, class: 'batch', deadlineMs: 2_000 } });
    expect(doomed.status).toBe(202);
    await waitForStatus(api, doomed.body.runId, TENANT_C_KEY, ['dead_lettered'], 30_000);
    expect((await limit(2)).status).toBe(200);
    await page.click('a[href="#/dlq"]');
    const row = page.locator('[data-testid=dlq] tr', { hasText: 'expired' }).first();
    await row.waitFor({ timeout: UI_TIMEOUT_MS });
    await row.locator('input[type=checkbox]').check();
    await row.locator('button.link').click();
    await page.waitForSelector(`[data-testid=dlq-row] >> text=${doomed.body.runId}`);
    await page.click('[data-testid=dlq-dry-run]');
    await page.waitForSelector('[data-testid=dlq-answer] >> text=dry run, nothing changed: would replay 1');
    await shot('dlq');
    await page.click('[data-testid=dlq-replay]');
    await page.waitForSelector('[data-testid=dlq-answer] >> text=replayed 1');
    await waitForStatus(api, doomed.body.runId, TENANT_C_KEY, ['completed'], 30_000);
    // The dry run leaves an audit line of its own before it (dryRun: true).
    const audit = await eventually(async () => sluice.logs.find((l) => {
      const line = l.audit as { action?: string; dryRun?: boolean } | undefined;
      return line?.action === 'dlq.replay' && line.dryRun === false;
    }), 5_000, 'the audit line of the replay');
    expect(audit.audit).toMatchObject({ outcome: 'done', replayed: 1, by: expect.stringMatching(/^console:/) });
  });

  it('logs out: the session is gone and the login form is back', async () => {
    await page.click('header button.link');
    await page.waitForSelector('input[name=key]');
    expect(await page.evaluate(async () => (await fetch('/console/api/overview')).status)).toBe(401);
  });
});
