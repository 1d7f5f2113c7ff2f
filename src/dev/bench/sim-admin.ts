/** The provider simulator's admin key in the local config the benches start it with. */
const SIM_ADMIN_KEY = 'local-admin-key';

/** One call to the simulator's admin API (fault profiles, call statistics); a non-2xx answer throws. */
export async function simAdmin(simulatorUrl: string, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${simulatorUrl}/admin${path}`, {
    method,
    headers: { authorization: `Bearer ${SIM_ADMIN_KEY}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(5_000),
  });
  if (!res.ok) throw new Error(`${method} /admin${path}: HTTP ${res.status} ${await res.text()}`);
  return res.status === 204 ? undefined : res.json();
}
