/** The URL with any password replaced, for logs, status output and error messages. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '<unparsable URL>';
  }
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
