import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { RedisKeys } from '../../redis/keys.js';
import { sha256Hex } from '../../util/sha256-hex.js';

/** The session cookie's name; scoped to `/console` so no other route ever receives it. */
export const SESSION_COOKIE = 'sluice_console';
export const COOKIE_PATH = '/console';
/** The header a state-changing console call carries its session's CSRF token in. */
export const CSRF_HEADER = 'x-csrf-token';

/** A console session as the server keeps it: the token its pages must echo, and when it ends. */
export interface ConsoleSession {
  /** Names the session in audit lines without revealing its token: a prefix of the token's digest. */
  id: string;
  csrfToken: string;
  expiresAt: number;
}

/** 32 random bytes, URL-safe: unguessable, and fits a cookie and a header as is. */
export function newToken(): string {
  return randomBytes(32).toString('base64url');
}

/** The value of one cookie in a `Cookie` header, or undefined. */
export function cookieValue(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/**
 * The `Set-Cookie` value that opens (or, with `maxAgeSec` 0, ends) a session. HttpOnly: no script
 * reads it, so an injected script cannot carry it away; SameSite=Strict: no other site's page can
 * make the browser send it; Secure whenever the console was reached over https.
 */
export function sessionCookie(token: string, opts: { maxAgeSec: number; secure: boolean }): string {
  return [`${SESSION_COOKIE}=${token}`, `Path=${COOKIE_PATH}`, `Max-Age=${opts.maxAgeSec}`, 'HttpOnly', 'SameSite=Strict', ...(opts.secure ? ['Secure'] : [])].join('; ');
}

/** Whether a request's CSRF header carries the session's token (constant-time on equal lengths). */
export function csrfMatches(session: Pick<ConsoleSession, 'csrfToken'>, given: string | string[] | undefined): boolean {
  if (typeof given !== 'string') return false;
  const a = Buffer.from(session.csrfToken);
  const b = Buffer.from(given);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Methods that change something: each needs the CSRF token. */
export function changesState(method: string): boolean {
  return method !== 'GET' && method !== 'HEAD' && method !== 'OPTIONS';
}

/** The Redis commands sessions use (a narrow view of the shared client). */
export interface SessionRedis {
  set(key: string, value: string, secondsToken: 'EX', seconds: number): Promise<unknown>;
  get(key: string): Promise<string | null>;
  del(key: string): Promise<number>;
}

interface StoredSession {
  csrfToken: string;
  expiresAt: number;
}

/**
 * Console sessions in Redis, each expiring with its TTL, so any API instance accepts a session
 * another opened and a logout holds everywhere at once. Keyed by the token's digest: whoever reads
 * Redis learns no cookie that would open the console.
 */
export class ConsoleSessions {
  constructor(
    private readonly redis: SessionRedis,
    private readonly keys: Pick<RedisKeys, 'consoleSession'>,
    private readonly ttlSec: number,
    private readonly now: () => number = Date.now,
  ) {}

  async open(): Promise<{ token: string; session: ConsoleSession }> {
    const token = newToken();
    const stored: StoredSession = { csrfToken: newToken(), expiresAt: this.now() + this.ttlSec * 1000 };
    await this.redis.set(this.keys.consoleSession(sha256Hex(token)), JSON.stringify(stored), 'EX', this.ttlSec);
    return { token, session: { id: sessionId(token), ...stored } };
  }

  /** The session a cookie's token opens, or undefined when unknown or expired. */
  async find(token: string | undefined): Promise<ConsoleSession | undefined> {
    if (!token || token.length > 128) return undefined;
    const text = await this.redis.get(this.keys.consoleSession(sha256Hex(token)));
    if (text === null) return undefined;
    const stored = JSON.parse(text) as StoredSession;
    return stored.expiresAt > this.now() ? { id: sessionId(token), ...stored } : undefined;
  }

  async close(token: string): Promise<void> {
    await this.redis.del(this.keys.consoleSession(sha256Hex(token)));
  }
}

function sessionId(token: string): string {
  return sha256Hex(token).slice(0, 12);
}

/**
 * Whether a browser's `Origin` names this host. Browsers send it on every state-changing fetch: a
 * request from another origin is refused before its CSRF token is even looked at. A request
 * without one comes from no browser page, and the token still decides.
 */
export function sameOrigin(origin: string | undefined, host: string | undefined): boolean {
  if (origin === undefined) return true;
  try {
    return host !== undefined && new URL(origin).host === host;
  } catch {
    return false;
  }
}
