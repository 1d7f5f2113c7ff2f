/**
 * Calls to the console API. The session is the HttpOnly cookie, which no script here can read; the
 * CSRF token lives only in this module's memory (never localStorage), fetched again on each load.
 */
let csrfToken: string | undefined;

export class LoggedOut extends Error {}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** `session`: a 401 means the session ended (so the login form shows); at login it means the key is unknown. */
async function call<T>(method: string, path: string, body?: unknown, session = true): Promise<T> {
  const res = await fetch(path, {
    method,
    credentials: 'same-origin',
    headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...(csrfToken && method !== 'GET' ? { 'x-csrf-token': csrfToken } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  if (res.status === 401 && session) {
    csrfToken = undefined;
    throw new LoggedOut('log in again');
  }
  if (res.status === 204) return undefined as T;
  const json = (await res.json()) as T & { detail?: string; title?: string };
  if (!res.ok) throw new ApiError(res.status, json.detail ?? json.title ?? `HTTP ${res.status}`);
  return json;
}

export const get = <T>(path: string) => call<T>('GET', `/console/api/${path}`);
export const put = <T>(path: string, body: unknown) => call<T>('PUT', `/console/api/${path}`, body);
export const post = <T>(path: string, body?: unknown) => call<T>('POST', `/console/api/${path}`, body ?? {});
export const del = <T>(path: string) => call<T>('DELETE', `/console/api/${path}`);

/** Whether a session is open; keeps its CSRF token for the calls that change something. */
export async function resume(): Promise<boolean> {
  try {
    csrfToken = (await get<{ csrfToken: string }>('session')).csrfToken;
    return true;
  } catch (err) {
    if (err instanceof LoggedOut) return false;
    throw err;
  }
}

export async function login(key: string): Promise<void> {
  csrfToken = (await call<{ csrfToken: string }>('POST', '/console/session', { key }, false)).csrfToken;
}

export async function logout(): Promise<void> {
  await call<void>('DELETE', '/console/session');
  csrfToken = undefined;
}
