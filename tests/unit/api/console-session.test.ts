import { describe, expect, it } from 'vitest';
import { changesState, ConsoleSessions, cookieValue, csrfMatches, sameOrigin, sessionCookie } from '../../../src/api/console/console-session.js';
import { redisKeys } from '../../../src/redis/keys.js';

function memoryRedis() {
  const values = new Map<string, { v: string; ttl: number }>();
  return {
    values,
    set: async (k: string, v: string, _ex: 'EX', ttl: number) => (values.set(k, { v, ttl }), 'OK' as const),
    get: async (k: string) => values.get(k)?.v ?? null,
    del: async (k: string) => Number(values.delete(k)),
  };
}

describe('console session cookies', () => {
  it('are HttpOnly, SameSite=Strict, scoped to /console, and Secure only over https', () => {
    expect(sessionCookie('t', { maxAgeSec: 60, secure: false })).toBe('sluice_console=t; Path=/console; Max-Age=60; HttpOnly; SameSite=Strict');
    expect(sessionCookie('t', { maxAgeSec: 60, secure: true })).toMatch(/; Secure$/);
  });

  it('are read out of a Cookie header among others', () => {
    expect(cookieValue('a=1; sluice_console=abc; b=2', 'sluice_console')).toBe('abc');
    expect(cookieValue('xsluice_console=abc', 'sluice_console')).toBeUndefined();
    expect(cookieValue(undefined, 'sluice_console')).toBeUndefined();
  });
});

describe('CSRF and origin checks', () => {
  it('accept only the session token itself', () => {
    const session = { csrfToken: 'abcdef' };
    expect(csrfMatches(session, 'abcdef')).toBe(true);
    expect(csrfMatches(session, 'abcdeg')).toBe(false);
    expect(csrfMatches(session, 'abc')).toBe(false);
    expect(csrfMatches(session, undefined)).toBe(false);
    expect(csrfMatches(session, ['abcdef'])).toBe(false);
  });

  it('apply to every method but reads', () => {
    expect(['GET', 'HEAD', 'OPTIONS'].map(changesState)).toEqual([false, false, false]);
    expect(['POST', 'PUT', 'DELETE', 'PATCH'].map(changesState)).toEqual([true, true, true, true]);
  });

  it('let through this host, or no Origin at all, and nothing else', () => {
    expect(sameOrigin('http://127.0.0.1:8080', '127.0.0.1:8080')).toBe(true);
    expect(sameOrigin(undefined, '127.0.0.1:8080')).toBe(true);
    expect(sameOrigin('http://127.0.0.1:9999', '127.0.0.1:8080')).toBe(false);
    expect(sameOrigin('null', '127.0.0.1:8080')).toBe(false);
  });
});

describe('ConsoleSessions', () => {
  it('keeps a session under its token digest with the TTL, finds it by token, and forgets it at close', async () => {
    const redis = memoryRedis();
    let now = 1_000_000;
    const sessions = new ConsoleSessions(redis, redisKeys('ns-'), 600, () => now);
    const { token, session } = await sessions.open();
    const [key, stored] = [...redis.values][0]!;
    expect(key).toMatch(/^ns-sluice:console:session:[0-9a-f]{64}$/);
    expect(key).not.toContain(token);
    expect(stored.ttl).toBe(600);
    expect(await sessions.find(token)).toEqual(session);
    expect(await sessions.find(`${token}x`)).toBeUndefined();
    now += 600_000;
    expect(await sessions.find(token), 'expired, even if Redis still held it').toBeUndefined();
    await sessions.close(token);
    expect(redis.values.size).toBe(0);
  });
});
