import { TENANT_A_KEY, TENANT_B_KEY, TENANT_C_KEY, http } from '../integration/harness.js';

/** One HTTP exchange of a drill, kept whole so a failed invariant can show the request that broke it. */
export interface Exchange {
  at: number;
  method: string;
  path: string;
  tenant: string;
  /** 0 when no answer came (connection refused or reset, or nothing within the client's 15 s). */
  status: number;
  contentType: string | null;
  retryAfter: string | null;
  body: unknown;
  error?: string;
}

export interface AcceptedRun {
  runId: string;
  tenant: string;
  key: string;
  workflow: string;
}

/** Every exchange of one drill and the runs that got a 202, shared by the load and the checks. */
export class DrillLog {
  readonly exchanges: Exchange[] = [];
  readonly accepted = new Map<string, AcceptedRun>();

  constructor(readonly api: string) {}

  async call(tenant: string, key: string, method: string, path: string, init: { json?: unknown; body?: string | Buffer; headers?: Record<string, string> } = {}): Promise<Exchange> {
    const at = Date.now();
    let exchange: Exchange;
    try {
      const r = await http(`${this.api}${path}`, { method, key, ...init });
      exchange = { at, method, path, tenant, status: r.status, contentType: r.headers.get('content-type'), retryAfter: r.headers.get('retry-after'), body: r.body };
    } catch (err) {
      exchange = { at, method, path, tenant, status: 0, contentType: null, retryAfter: null, body: undefined, error: String((err as Error).cause ?? err) };
    }
    this.exchanges.push(exchange);
    return exchange;
  }

  /** POST /v1/runs; a 202 adds the run to the set the invariants follow. */
  async submit(stream: Pick<LoadStream, 'tenant' | 'key' | 'workflow'>, init: { json?: unknown; body?: string | Buffer; headers?: Record<string, string> }): Promise<Exchange> {
    const exchange = await this.call(stream.tenant, stream.key, 'POST', '/v1/runs', init);
    const runId = (exchange.body as { runId?: unknown } | undefined)?.runId;
    if (exchange.status === 202 && typeof runId === 'string') this.accepted.set(runId, { runId, tenant: stream.tenant, key: stream.key, workflow: stream.workflow });
    return exchange;
  }
}

/** What one tenant keeps submitting during a drill. */
export interface LoadStream {
  tenant: string;
  key: string;
  workflow: string;
  deadlineMs: number;
}

/**
 * The drills' usual mix: an interactive tenant that degrades, a batch tenant, an interactive
 * tenant that fails rather than degrade. Deadlines are short so a run that cannot finish expires
 * within a drill's bound instead of waiting an hour.
 */
export const MIXED_TENANTS: LoadStream[] = [
  { tenant: 'tenant-a', key: TENANT_A_KEY, workflow: 'support-reply', deadlineMs: 20_000 },
  { tenant: 'tenant-b', key: TENANT_B_KEY, workflow: 'report-digest', deadlineMs: 40_000 },
  { tenant: 'tenant-c', key: TENANT_C_KEY, workflow: 'support-reply', deadlineMs: 20_000 },
];

export interface LoadOptions {
  streams: LoadStream[];
  /** Submissions per second over all streams, taken in turn. */
  ratePerSec: number;
  durationMs: number;
  maxRequests: number;
  /** After each submission, read the stream's latest accepted run (reads matter in outages too). */
  readBack?: boolean;
  /** Requests in flight at most; a tick that finds the bound reached sends nothing. */
  maxInFlight?: number;
}

/**
 * Steady, open-loop load: a submission every 1/rate seconds whatever the answers, until the time
 * or the count runs out. Every other submission carries an Idempotency-Key, so both admission
 * paths are under load. Resolves when the last request has its answer.
 */
export async function steadyLoad(log: DrillLog, opts: LoadOptions): Promise<void> {
  const maxInFlight = opts.maxInFlight ?? 64;
  const intervalMs = 1000 / opts.ratePerSec;
  const started = Date.now();
  const inFlight = new Set<Promise<unknown>>();
  const latest = new Map<string, string>();
  for (let i = 0; i < opts.maxRequests && Date.now() - started < opts.durationMs; i++) {
    if (inFlight.size < maxInFlight) {
      const stream = opts.streams[i % opts.streams.length]!;
      const headers: Record<string, string> = i % 2 === 0 ? { 'idempotency-key': `drill-${started}-${i}` } : {};
      const p = (async () => {
        const ex = await log.submit(stream, { json: { workflow: stream.workflow, input: { orderId: String(i), message: `drill request ${i}` }, deadlineMs: stream.deadlineMs }, headers });
        const runId = (ex.body as { runId?: string } | undefined)?.runId;
        if (ex.status === 202 && runId) latest.set(stream.tenant, runId);
        const readId = latest.get(stream.tenant);
        if (opts.readBack && readId) await log.call(stream.tenant, stream.key, 'GET', `/v1/runs/${readId}`);
      })();
      inFlight.add(p);
      void p.finally(() => inFlight.delete(p));
    }
    await new Promise((r) => setTimeout(r, Math.max(0, started + (i + 1) * intervalMs - Date.now())));
  }
  await Promise.all(inFlight);
}
