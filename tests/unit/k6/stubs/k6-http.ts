/** Stand-in for k6's `k6/http` module, recording calls so the scenario script can be checked under vitest. */
export const calls: { method: string; url: string; body: string; params: Record<string, any> }[] = [];
let nextStatus = 202;

export function respondWith(status: number): void {
  nextStatus = status;
}

const http = {
  post(url: string, body: string, params: Record<string, any>) {
    calls.push({ method: 'POST', url, body, params });
    return { status: nextStatus, headers: nextStatus === 202 ? {} : { 'Retry-After': '1' } };
  },
  expectedStatuses(...statuses: number[]) {
    return { statuses };
  },
};
export default http;
