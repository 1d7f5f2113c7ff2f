import { randomUUID } from 'node:crypto';
import { SluiceClient, SluiceRefusal, TERMINAL_RUN_STATUSES, type Run, type SubmittedRun } from '../../client/index.js';
import { SluiceProducer, type SubmissionOutcome } from '../../producers/index.js';
import { retryWaits, type Attempt } from './attempts.js';

/**
 * `sluice demo`: the overload contract shown through the client library against a running local
 * Sluice with the demo config (its published keys and tenant-a's published ingress secret).
 */

export interface DemoOptions {
  apiUrl: string;
  brokers: string[];
  /** Runs submitted through the Kafka ingress. */
  runs: number;
  /** Submissions sent at once by one tenant: more than its bucket holds, so some are refused. */
  burst: number;
  /** Bound on every wait (a run's end, an outcome, a submission with its retries). */
  timeoutMs: number;
  ingressSecret: string;
  namespace?: string;
  registryUrl?: string;
}

/** The demo config's published keys: tenant-a follows one run, tenant-b bursts. */
const FOLLOW_KEY = 'local-key-a';
const BURST_KEY = 'local-key-b';
const WORKFLOW = 'support-reply';
/** Streams followed at once at the end, well under a tenant's read bucket and stream limit. */
const FOLLOW_AT_ONCE = 10;
/** Retries printed one by one; the rest are counted. */
const SHOWN_RETRIES = 3;

export interface DemoResult {
  /** Runs that completed, by tenant. */
  completed: Record<string, string[]>;
  /** What did not end as expected; empty when the demo passed. */
  problems: string[];
}

type Print = (line: string) => void;

export async function runDemo(opts: DemoOptions, print: Print): Promise<DemoResult> {
  const result: DemoResult = { completed: { 'tenant-a': [], 'tenant-b': [] }, problems: [] };
  const summary: string[] = [];
  const step = async (name: string, body: () => Promise<void>) => {
    print(`\n== ${name}`);
    try {
      await body();
    } catch (err) {
      result.problems.push(`${name}: ${(err as Error).message}`);
      print(`   FAILED: ${(err as Error).message}`);
    }
  };

  await step('HTTP: one interactive run, followed over SSE', async () => {
    const client = new SluiceClient({ baseUrl: opts.apiUrl, apiKey: FOLLOW_KEY, timeoutMs: opts.timeoutMs });
    const request = { workflow: WORKFLOW, input: { message: 'Where is order A-1001?' }, class: 'interactive' as const, idempotencyKey: `demo-${randomUUID()}` };
    const submitted = await client.submit(request);
    print(`   submitted run ${submitted.runId} (Idempotency-Key ${submitted.idempotencyKey}): 202 ${submitted.admission}`);
    const run = await follow(client, submitted.runId, opts.timeoutMs, (line) => print(`   ${line}`));
    if (run.status === 'completed') result.completed['tenant-a']!.push(run.runId);
    else result.problems.push(`the interactive run ${run.runId} ended ${run.status}, not completed`);
    const again = await client.submit(request);
    print(`   the same key again: run ${again.runId}${again.idempotentReplayed ? ' (Idempotent-Replayed: true)' : ''}`);
    if (again.runId !== submitted.runId) result.problems.push(`resubmitting key ${request.idempotencyKey} gave run ${again.runId}, not ${submitted.runId}`);
    summary.push(`HTTP: run ${run.runId} ${run.status}; its key resubmitted gave ${again.runId === run.runId ? 'the same run' : `another run (${again.runId})`}`);
  });

  await step(`HTTP: a burst of ${opts.burst} submissions at once from tenant-b`, async () => {
    const attempts: Attempt[] = [];
    const client = new SluiceClient({ baseUrl: opts.apiUrl, apiKey: BURST_KEY, timeoutMs: opts.timeoutMs, fetch: recordingFetch(attempts) });
    const request = (idempotencyKey: string) => ({ workflow: WORKFLOW, input: { message: `Burst order ${idempotencyKey}` }, class: 'batch' as const, idempotencyKey });
    const keys = Array.from({ length: opts.burst }, () => `demo-${randomUUID()}`);
    const first = await Promise.allSettled(keys.map((key) => client.submit(request(key))));
    const admitted: SubmittedRun[] = [];
    const refusedKeys: string[] = [];
    const refusals = new Map<string, { count: number; retryAfter: Set<number | undefined> }>();
    first.forEach((answer, i) => {
      if (answer.status === 'fulfilled') return void admitted.push(answer.value);
      if (!(answer.reason instanceof SluiceRefusal)) throw answer.reason;
      const r = answer.reason;
      refusedKeys.push(keys[i]!);
      const seen = refusals.get(`${r.status} ${r.code}`) ?? { count: 0, retryAfter: new Set() };
      seen.count += 1;
      seen.retryAfter.add(r.retryAfterSec);
      refusals.set(`${r.status} ${r.code}`, seen);
    });
    print(`   at once: ${admitted.length} admitted (202), ${refusedKeys.length} refused`);
    for (const [answer, seen] of refusals) print(`     ${seen.count} × ${answer}, Retry-After ${[...seen.retryAfter].map((s) => (s === undefined ? 'none' : `${s} s`)).join(', ')}`);
    if (refusedKeys.length === 0) result.problems.push(`a burst of ${opts.burst} was not refused at all: give --burst more than tenant-b's bucket`);
    const without = [...refusals].filter(([, seen]) => seen.retryAfter.has(undefined)).map(([answer]) => answer);
    if (without.length > 0) result.problems.push(`refusals without Retry-After: ${without.join(', ')}`);

    print(`   the refused ones again under their keys, with retry (the client waits each Retry-After):`);
    const retryFrom = attempts.length;
    const retried = await Promise.allSettled(refusedKeys.map((key) => client.submit({ ...request(key), retry: { maxAttempts: 100, maxWaitMs: opts.timeoutMs } })));
    const waits = retryWaits(attempts.slice(retryFrom));
    const late = retried.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason as Error);
    for (const r of retried) if (r.status === 'fulfilled') admitted.push(r.value);
    const early = waits.filter((w) => !w.honoured);
    const shortest = waits.reduce<number | undefined>((m, w) => (m === undefined ? w.waitedMs : Math.min(m, w.waitedMs)), undefined);
    for (const w of waits.slice(0, SHOWN_RETRIES)) print(`     key ${w.idempotencyKey}: refused with Retry-After ${w.askedSec} s, sent again ${(w.waitedMs / 1000).toFixed(2)} s later`);
    print(`     ${refusedKeys.length - late.length} of ${refusedKeys.length} admitted; ${waits.length} retries, ${early.length} sooner than their Retry-After${shortest === undefined ? '' : ` (shortest wait ${(shortest / 1000).toFixed(2)} s)`}`);
    if (late.length > 0) result.problems.push(`${late.length} refused submissions not admitted within their retries: ${late[0]!.message}`);
    if (early.length > 0) result.problems.push(`${early.length} retries came before their Retry-After`);
    const distinct = new Set(admitted.map((a) => a.runId));
    if (distinct.size !== admitted.length) result.problems.push(`${admitted.length - distinct.size} burst submissions started a second run`);

    print(`   following the ${admitted.length} admitted runs to their end`);
    const ends = await mapAtMost(FOLLOW_AT_ONCE, admitted, (a) => client.waitForResult(a.runId, { timeoutMs: opts.timeoutMs }).then((run) => run.status, (err: Error) => `lost (${err.message})`));
    const byEnd = tally(ends);
    admitted.forEach((a, i) => ends[i] === 'completed' && result.completed['tenant-b']!.push(a.runId));
    print(`     ${Object.entries(byEnd).map(([end, n]) => `${n} ${end}`).join(', ')}`);
    const unfinished = ends.filter((end) => !TERMINAL_RUN_STATUSES.has(end as Run['status'])).length;
    if (unfinished > 0) result.problems.push(`${unfinished} burst runs did not reach a terminal status within ${opts.timeoutMs} ms`);
    summary.push(`burst: ${opts.burst} sent, ${opts.burst - refusedKeys.length} admitted at once, ${refusedKeys.length} refused; ${waits.length} client retries, ${early.length} before their Retry-After; runs ${Object.entries(byEnd).map(([end, n]) => `${n} ${end}`).join(', ')}`);
  });

  await step(`Kafka ingress: SluiceProducer submits ${opts.runs} run${opts.runs === 1 ? '' : 's'} for tenant-a`, async () => {
    const producer = new SluiceProducer({ brokers: opts.brokers, tenantId: 'tenant-a', secret: opts.ingressSecret, namespace: opts.namespace, clientId: 'sluice-demo', ...(opts.registryUrl ? { registry: { url: opts.registryUrl } } : {}) });
    try {
      const sent = await Promise.all(Array.from({ length: opts.runs }, (_, i) => producer.submit({ workflow: WORKFLOW, input: { message: `Where is order K-${i + 1}?` }, idempotencyKey: `demo-${randomUUID()}` })));
      print(`   produced ${sent.length} signed requests to the ingress topic`);
      const ends = await Promise.all(
        sent.map(async ({ requestId }) => {
          const answer = await producer.awaitOutcome(requestId, { until: 'answer', timeoutMs: opts.timeoutMs });
          print(`   request ${requestId}: ${describe(answer)}`);
          const end = await producer.awaitOutcome(requestId, { until: 'terminal', timeoutMs: opts.timeoutMs });
          print(`   request ${requestId}: ${describe(end)}`);
          return end;
        }),
      );
      for (const end of ends) if (end.status === 'completed') result.completed['tenant-a']!.push(end.runId);
      const byEnd = tally(ends.map((e) => e.status));
      if ((byEnd.completed ?? 0) !== ends.length) result.problems.push(`ingress runs ended ${JSON.stringify(byEnd)}, not all completed`);
      summary.push(`Kafka ingress: ${sent.length} submitted, ${Object.entries(byEnd).map(([end, n]) => `${n} ${end}`).join(', ')}`);
    } finally {
      await producer.close();
    }
  });

  print('\n== Summary');
  for (const line of summary) print(`   ${line}`);
  for (const [tenant, runs] of Object.entries(result.completed)) print(`   completed runs of ${tenant}: ${runs.join(' ') || 'none'}`);
  print(result.problems.length === 0 ? '   everything ended as expected' : `   NOT as expected:\n${result.problems.map((p) => `     - ${p}`).join('\n')}`);
  return result;
}

/** Prints the run's status events to its end, and returns the run as it ended. */
async function follow(client: SluiceClient, runId: string, timeoutMs: number, print: Print): Promise<Run> {
  const signal = AbortSignal.timeout(timeoutMs);
  // A status's message names the status itself ("running: step 1/3 …"); one that does not gets it in front.
  for await (const e of client.events(runId, { signal })) print(`event ${e.sequence}: ${e.message.startsWith(e.status) ? e.message : `${e.status}: ${e.message}`}`);
  return client.get(runId, { signal });
}

function describe(o: SubmissionOutcome): string {
  const extra = [o.code, o.retryAfterSec === undefined ? undefined : `again in ${o.retryAfterSec} s`].filter(Boolean).join(', ');
  return `run ${o.runId} ${o.status}${extra ? ` (${extra})` : ''}`;
}

/** A fetch that notes every submission's answer and timing, for the demo to judge the client's retries. */
function recordingFetch(attempts: Attempt[]): typeof fetch {
  return async (url, init) => {
    const sentAt = Date.now();
    const res = await fetch(url, init);
    const key = new Headers(init?.headers).get('idempotency-key');
    if (init?.method === 'POST' && key) {
      const header = res.headers.get('retry-after');
      attempts.push({ idempotencyKey: key, sentAt, answeredAt: Date.now(), status: res.status, retryAfterSec: header !== null && /^\d+$/.test(header) ? Number(header) : undefined });
    }
    return res;
  };
}

async function mapAtMost<T, R>(limit: number, items: readonly T[], fn: (item: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < items.length; i = next++) out[i] = await fn(items[i]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

function tally(values: readonly string[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const v of values) counts[v] = (counts[v] ?? 0) + 1;
  return counts;
}
