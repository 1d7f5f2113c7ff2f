/** Stand-in for k6's `k6/http` module, recording calls so the scenario scripts can be checked under vitest. */
export const calls: { method: string; url: string; body?: string; params: Record<string, any> }[] = [];
const statuses: number[] = [];
let simProfiles: Record<string, unknown> = {};

/** The statuses of the next POSTs, in order; 202 once they are used up. */
export function respondWith(...next: number[]): void {
  statuses.push(...next);
}

/** What GET /admin/faults answers. */
export function simulatorHas(profiles: Record<string, unknown>): void {
  simProfiles = profiles;
}

const http = {
  post(url: string, body: string, params: Record<string, any>) {
    calls.push({ method: 'POST', url, body, params });
    const status = statuses.shift() ?? 202;
    return { status, headers: [0, 202].includes(status) ? {} : { 'Retry-After': '1' } };
  },
  put(url: string, body: string, params: Record<string, any>) {
    calls.push({ method: 'PUT', url, body, params });
    return { status: 200, headers: {} };
  },
  get(url: string, params: Record<string, any>) {
    calls.push({ method: 'GET', url, params });
    return { status: 200, headers: {}, json: () => simProfiles };
  },
  expectedStatuses(...expected: number[]) {
    return { expected };
  },
};
export default http;
