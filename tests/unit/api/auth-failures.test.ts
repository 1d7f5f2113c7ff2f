import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { AuthFailureThrottle } from '../../../src/api/auth-throttle.js';
import { loadConfig } from '../../../src/config/load.js';
import { auditCapture } from '../../support/audit-capture.js';
import { fakeBreakerAdmin } from '../../support/breaker-admin-fakes.js';
import { adminApp } from './admin-app.js';
import { ADMIN, expectProblem, KEY_A } from './run-status-app.js';

const ATTACKER = '203.0.113.7';
const TENANT = '198.51.100.20';

let app: FastifyInstance | undefined;
let clock: number;
let audit: ReturnType<typeof auditCapture>;

/** The whole API server with a throttle of 10 failures a minute per address, on a clock the test moves. */
function server(o: { trustProxy?: boolean } = {}): FastifyInstance {
  clock = 0;
  audit = auditCapture();
  const config = loadConfig({ env: {} });
  app = adminApp({
    config: { ...config, api: { ...config.api, trustProxy: o.trustProxy ?? false } },
    limits: { overrides: async () => new Map(), set: async () => undefined },
    breakers: fakeBreakerAdmin().deps,
    audit: audit.logger,
    authFailures: new AuthFailureThrottle({ attempts: 10, perSec: 60, maxAddresses: 100 }, () => clock),
  });
  return app;
}

afterEach(async () => {
  await app?.close();
  app = undefined;
});

const call = (a: FastifyInstance, from: string, authorization?: string, url = '/v1/admin/limits', headers: Record<string, string> = {}) =>
  a.inject({ method: 'GET', url, remoteAddress: from, headers: { ...(authorization ? { authorization } : {}), ...headers } });

describe('failed Bearer authentications, throttled per client address', () => {
  it('answers 429 problem+json with Retry-After once an address spent its failures, and then refuses its right key too, until one refills', async () => {
    const a = server();
    const answers: number[] = [];
    for (let i = 0; i < 15; i++) answers.push((await call(a, ATTACKER, `Bearer guess-${i}`)).statusCode);
    expect(answers).toEqual([...Array<number>(10).fill(401), ...Array<number>(5).fill(429)]);
    const refused = await call(a, ATTACKER, ADMIN);
    expect(expectProblem(refused, 429, 'rate_limited')).toMatchObject({ retryAfterSec: 6, retryable: true });
    expect(refused.headers['retry-after']).toBe('6');
    clock = 6_000;
    expect((await call(a, ATTACKER, ADMIN)).statusCode).toBe(200);
    // One attempt refilled, and the right key did not give back the ones the guesses spent.
    expect((await call(a, ATTACKER, 'Bearer guess-15')).statusCode).toBe(401);
    expect((await call(a, ATTACKER, ADMIN)).statusCode).toBe(429);
  });

  it('never touches another address: a tenant elsewhere, or the admin, is answered as ever while one address is throttled', async () => {
    const a = server();
    for (let i = 0; i < 20; i++) await call(a, ATTACKER, `Bearer guess-${i}`);
    expect((await call(a, ATTACKER, KEY_A)).statusCode).toBe(429);
    // Authenticated: the tenant's key is known (and refused here as no admin's, 403).
    expect((await call(a, TENANT, KEY_A)).statusCode).toBe(403);
    expect((await call(a, TENANT, ADMIN)).statusCode).toBe(200);
  });

  it('counts only failures: a valid key interleaved with guesses does not earn the guesser more of them', async () => {
    const a = server();
    const guessed: number[] = [];
    for (let i = 0; i < 30; i++) {
      expect([200, 429]).toContain((await call(a, ATTACKER, ADMIN)).statusCode);
      guessed.push((await call(a, ATTACKER, `Bearer guess-${i}`)).statusCode);
    }
    expect(guessed.filter((s) => s === 401)).toHaveLength(10);
  });

  it('does not count a request without a key, nor a tenant key where the admin key is needed', async () => {
    const a = server();
    for (let i = 0; i < 30; i++) {
      expect((await call(a, ATTACKER)).statusCode).toBe(401);
      expect((await call(a, ATTACKER, KEY_A)).statusCode).toBe(403);
    }
    expect((await call(a, ATTACKER, ADMIN)).statusCode).toBe(200);
  });

  it('counts by the address X-Forwarded-For names only when the proxy is trusted, so a client cannot name its way out of its bucket', async () => {
    const direct = server();
    for (let i = 0; i < 10; i++) await call(direct, ATTACKER, `Bearer guess-${i}`, '/v1/admin/limits', { 'x-forwarded-for': `192.0.2.${i}` });
    expect((await call(direct, ATTACKER, ADMIN, '/v1/admin/limits', { 'x-forwarded-for': '192.0.2.200' })).statusCode).toBe(429);
    await direct.close();
    const proxied = server({ trustProxy: true });
    for (let i = 0; i < 10; i++) await call(proxied, '10.0.0.1', `Bearer guess-${i}`, '/v1/admin/limits', { 'x-forwarded-for': ATTACKER });
    expect((await call(proxied, '10.0.0.1', ADMIN, '/v1/admin/limits', { 'x-forwarded-for': ATTACKER })).statusCode).toBe(429);
    expect((await call(proxied, '10.0.0.1', ADMIN, '/v1/admin/limits', { 'x-forwarded-for': TENANT })).statusCode).toBe(200);
  });

  it('writes one auth.throttled audit line when an address starts being throttled, not one per refusal', async () => {
    const a = server();
    for (let i = 0; i < 25; i++) await call(a, ATTACKER, `Bearer guess-${i}`, '/v1/runs');
    expect(audit.entries).toEqual([expect.objectContaining({ action: 'auth.throttled', outcome: 'refused', via: 'api', principal: null, ip: ATTACKER, block: ATTACKER, retryAfterSec: 6 })]);
  });
});
