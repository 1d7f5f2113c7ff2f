/** What stands for a secret in anything Sluice prints or logs. */
export const REDACTED = '***';

/** Query parameters that carry a credential (libpq's `password`, `sslpassword`; tokens and secrets). */
const SECRET_PARAM = /pass|secret|token/i;

/**
 * The URL with any password (in its userinfo or a query parameter) replaced, for logs, status
 * output and error messages; unchanged when it holds none. Text that is not a URL is replaced
 * whole, since where its password is cannot be known.
 */
export function redactUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return '<unparsable URL>';
  }
  let redacted = false;
  if (u.password) {
    u.password = REDACTED;
    redacted = true;
  }
  for (const name of new Set(u.searchParams.keys())) {
    if (!SECRET_PARAM.test(name)) continue;
    u.searchParams.set(name, REDACTED);
    redacted = true;
  }
  return redacted ? u.toString() : url;
}

/** The URL's port, or `fallback` when it names none (the scheme's default). */
export function urlPort(url: string, fallback: number): number {
  try {
    const port = new URL(url).port;
    return port ? Number(port) : fallback;
  } catch {
    return fallback;
  }
}
