import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_KEY, freePort, http, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * The audit trail of a real API process whose log level is warn: every change and every login
 * still leaves its line on stdout, marked `"stream": "audit"`, while the ordinary info lines are
 * gone. The limit change through the admin API, a refused and a done login, and a logout.
 */
describe('the audit trail, at SLUICE_LOG_LEVEL=warn', () => {
  let sluice: SluiceProcess;
  let api: string;

  beforeAll(async () => {
    const port = await freePort();
    sluice = await startSluice({ configPath: writeTestConfig({ api: { port } }), roles: 'api', namespace: testNamespace('audit-trail'), env: { SLUICE_LOG_LEVEL: 'warn' }, ready: 'banner' });
    api = `http://127.0.0.1:${port}`;
  });

  afterAll(async () => {
    await sluice?.stop();
  });

  const login = (key: string) => http(`${api}/console/session`, { method: 'POST', headers: { origin: api }, json: { key } });

  it('writes a line for each change and login that the log level cannot silence', async () => {
    expect((await http(`${api}/v1/admin/limits`, { method: 'PUT', key: ADMIN_KEY, json: { scope: 'tenant', name: 'tenant-b', limit: 7 } })).status).toBe(200);
    expect((await login('a-guess')).status).toBe(401);
    const done = await login(ADMIN_KEY);
    expect(done.status).toBe(200);
    const cookie = done.headers.getSetCookie()[0]!.split(';')[0]!;
    const csrf = (done.body as { csrfToken: string }).csrfToken;
    expect((await http(`${api}/console/session`, { method: 'DELETE', headers: { cookie, 'x-csrf-token': csrf } })).status).toBe(204);

    const lines = () => sluice.logs as { stream?: string; level: number; audit: Record<string, unknown> }[];
    const audited = () => lines().filter((l) => l.stream === 'audit').map((l) => [l.audit.action, l.audit.outcome, l.audit.via]);
    await expect.poll(audited, { timeout: 5_000 }).toEqual([
      ['limit.change', 'done', 'api'],
      ['login', 'refused', 'console'],
      ['login', 'done', 'console'],
      ['logout', 'done', 'console'],
    ]);
    expect(lines().find((l) => l.stream === 'audit')).toMatchObject({ level: 30, audit: { scope: 'tenant', name: 'tenant-b', limit: 7, principal: 'admin' } });
    // The level holds for everything else: no ordinary info line, such as the limit change's own.
    expect(lines().filter((l) => l.stream !== 'audit' && l.level < 40)).toEqual([]);
  });
});
