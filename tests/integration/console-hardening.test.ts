import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_KEY, freePort, http, startSluice, TENANT_A_KEY, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * The console's login and headers against a real API process, behind a (pretend) proxy on
 * 127.0.0.1 that the config trusts: the failed-authentication throttle per client address (at the
 * login and on the Bearer routes), the cookie's `Secure` from X-Forwarded-Proto, a second login
 * ending the first session, and the console's headers on a path no route answers.
 */
describe('console hardening, over HTTP', () => {
  let sluice: SluiceProcess;
  let api: string;

  beforeAll(async () => {
    const port = await freePort();
    const configPath = writeTestConfig({ api: { port, trustProxy: ['127.0.0.1'], authFailureLimit: { attempts: 4, perSec: 60 } } });
    sluice = await startSluice({ configPath, roles: 'api', namespace: testNamespace('console-hard') });
    api = `http://127.0.0.1:${port}`;
  });

  afterAll(async () => {
    await sluice?.stop();
  });

  /** A login as the page does it, from the client address a proxy names. */
  const login = (client: string, headers: Record<string, string> = {}, key = ADMIN_KEY) =>
    fetch(`${api}/console/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin: api, 'x-forwarded-for': client, ...headers },
      body: JSON.stringify({ key }),
      signal: AbortSignal.timeout(10_000),
    });
  const cookieOf = (res: Response) => res.headers.getSetCookie()[0] ?? '';
  const sessionStatus = async (cookie: string) => (await fetch(`${api}/console/api/session`, { headers: { cookie: cookie.split(';')[0]! }, signal: AbortSignal.timeout(10_000) })).status;

  it('sets Secure on the cookie when the trusted proxy says the browser came over https, and not otherwise', async () => {
    const overHttps = await login('198.51.100.1', { 'x-forwarded-proto': 'https' });
    expect(overHttps.status).toBe(200);
    expect(cookieOf(overHttps)).toMatch(/; HttpOnly; SameSite=Strict; Secure$/);
    const overHttp = await login('198.51.100.1');
    expect(overHttp.status).toBe(200);
    expect(cookieOf(overHttp)).not.toContain('Secure');
  });

  it('ends the first session when the same browser logs in again', async () => {
    const first = cookieOf(await login('198.51.100.2'));
    expect(await sessionStatus(first)).toBe(200);
    const again = await login('198.51.100.2', { cookie: first.split(';')[0]! });
    expect(again.status).toBe(200);
    expect(await sessionStatus(first)).toBe(401);
    expect(await sessionStatus(cookieOf(again))).toBe(200);
  });

  it('answers 429 with Retry-After once a client address spent its failed logins, the right key too; another address still logs in', async () => {
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push((await login('203.0.113.7', {}, 'guess')).status);
    expect(answers).toEqual([401, 401, 401, 401]);
    const refused = await login('203.0.113.7');
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(((await refused.json()) as { code: string }).code).toBe('rate_limited');
    expect((await login('203.0.113.8')).status).toBe(200);
  });

  it('throttles guessing the admin key on /v1/admin/*: after the failures allowed every request from that address is 429, the right key too, and no other address notices', async () => {
    const admin = (client: string, key: string) => http(`${api}/v1/admin/limits`, { key, headers: { 'x-forwarded-for': client } });
    const answers: number[] = [];
    for (let i = 0; i < 15; i++) answers.push((await admin('203.0.113.9', `guess-${i}`)).status);
    expect(answers).toEqual([401, 401, 401, 401, ...Array<number>(11).fill(429)]);
    const refused = await admin('203.0.113.9', ADMIN_KEY);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('content-type')).toContain('application/problem+json');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(refused.body).toMatchObject({ code: 'rate_limited', retryable: true });
    expect((await admin('203.0.113.10', ADMIN_KEY)).status).toBe(200);
    expect((await http(`${api}/v1/runs/00000000-0000-7000-8000-000000000000`, { key: TENANT_A_KEY, headers: { 'x-forwarded-for': '198.51.100.30' } })).status).toBe(404);
    // The failure that started the throttle is on the audit trail, once.
    const throttled = sluice.logs.filter((l) => (l.audit as { action?: string } | undefined)?.action === 'auth.throttled' && (l.audit as { ip?: string }).ip === '203.0.113.9');
    expect(throttled).toHaveLength(1);
  });

  it("gives a path under /console that no route answers the console's headers", async () => {
    for (const path of ['/console/nope', '/console/api/nope']) {
      const res = await fetch(`${api}${path}`, { signal: AbortSignal.timeout(10_000) });
      expect(res.status, path).toBe(404);
      expect(res.headers.get('content-security-policy'), path).toContain("frame-ancestors 'none'");
      expect(res.headers.get('x-content-type-options'), path).toBe('nosniff');
    }
  });
});
