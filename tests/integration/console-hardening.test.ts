import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_KEY, freePort, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * The console's login and headers against a real API process, behind a (pretend) proxy on
 * 127.0.0.1 that the config trusts: the login rate limit per client address, the cookie's
 * `Secure` from X-Forwarded-Proto, a second login ending the first session, and the console's
 * headers on a path no route answers.
 */
describe('console hardening, over HTTP', () => {
  let sluice: SluiceProcess;
  let api: string;

  beforeAll(async () => {
    const port = await freePort();
    const configPath = writeTestConfig({ api: { port, trustProxy: ['127.0.0.1'], console: { loginRateLimit: { attempts: 4, perSec: 60 } } } });
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

  it('answers 429 with Retry-After once a client address used its login attempts, any key; another address still logs in', async () => {
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push((await login('203.0.113.7', {}, 'guess')).status);
    expect(answers).toEqual([401, 401, 401, 401]);
    const refused = await login('203.0.113.7');
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(((await refused.json()) as { code: string }).code).toBe('rate_limited');
    expect((await login('203.0.113.8')).status).toBe(200);
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
