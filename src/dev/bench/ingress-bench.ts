/**
 * The Kafka ingress against producing RunRequested straight to the work topic, side by side in one
 * Sluice process (roles processor and ingress, every cap and bucket far above the load): how fast
 * runs get onto the work topic, how fast they finish, and how much later a lone run starts.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { EventCodec } from '../../events/codec.js';
import { groupId } from '../../kafka/topics.js';
import { FileSchemaRegistry } from '../../events/file-schema-registry.js';
import { statusRequestId } from '../../events/ingress-request-id.js';
import { SluiceProducer } from '../../producers/sluice-producer.js';
import { isTerminal } from '../../status/run-history.js';
import { withTimeout } from '../../util/with-timeout.js';
import { waitFor } from '../infra/process.js';
import { withBenchHarness } from './bench-harness.js';
import { latencySummary } from './latency-summary.js';
import { consumeStatuses, runRequest, sluiceConfigDoc, startSimulator, withSluiceProcess } from './sluice-process.js';

const TENANTS = ['tenant-a', 'tenant-b', 'tenant-c'] as const;
const WORKFLOW = 'support-reply';
const CONCURRENCY = 64;
/** Bound on one lone run, and on each warm-up run (the first waits for the processor to join its group). */
const PROBE_TIMEOUT_MS = 60_000;

export interface IngressBenchOptions {
  /** Runs per burst, each path. */
  events: number;
  /** Lone runs per path for latency, the paths taking turns. */
  probes: number;
  /** Bound on each burst and on the probes of each path. */
  phaseTimeoutSec: number;
  json: boolean;
}

/** What the status topic said of a run: when it was queued (ingress only), started and ended. */
interface Seen {
  queuedAt?: number;
  startedAt?: number;
  endedAt?: number;
  status?: string;
}

interface PathFigures {
  events: number;
  /** Runs onto the work topic per second: publishes acknowledged (direct), `queued` statuses (ingress). */
  onWorkTopicPerSec: number;
  runsDonePerSec: number;
  completed: number;
  /** Lone runs: produce → `queued` (ingress only) and → `running`, ms. */
  queuedP50Ms?: number;
  queuedP99Ms?: number;
  startedP50Ms: number;
  startedP99Ms: number;
}

/** Resolves when `done()` holds, polling every 5 ms; rejects after `timeoutMs`, saying what it waited for. */
async function until(done: () => boolean, timeoutMs: number, what: string): Promise<void> {
  if ((await waitFor(timeoutMs, 5, async () => (done() ? true : undefined))) === undefined) throw new Error(`${what}: not within ${timeoutMs} ms`);
}

export async function benchIngress(o: IngressBenchOptions): Promise<void> {
  const secret = randomBytes(32).toString('hex');
  const stamp = Date.now().toString(36);
  const figures = await withBenchHarness('ingress', async (h) => {
    const simulatorUrl = await startSimulator(h);
    const secretFile = join(h.dir, 'ingress.secret');
    writeFileSync(secretFile, secret);
    return withSluiceProcess(
      h,
      {
        label: 'processor+ingress',
        index: 0,
        stamp,
        roles: 'processor,ingress',
        maxPending: o.events * 2,
        config: ({ registryDir, opsPort }) => {
          const c = sluiceConfigDoc({ simulatorUrl, registryDir, concurrency: CONCURRENCY, enforceCaps: true, opsPort });
          for (const t of TENANTS) c.tenants[t].ingress = { secretFile };
          return c;
        },
      },
      async (p) => {
        const registry = { dir: join(h.dir, 'schema-registry') };
        const kafka = new Kafka({ brokers: h.infra.kafkaBrokers, logLevel: logLevel.NOTHING });
        const codec = new EventCodec(new FileSchemaRegistry(registry.dir));
        const byRun = new Map<string, Seen>();
        const runOfRequest = new Map<string, string>();
        const seen = (runId: string) => byRun.get(runId) ?? byRun.set(runId, {}).get(runId)!;
        const group = `${p.namespace}bench.ingress-watch`;
        const watcher = await consumeStatuses(kafka, codec, p.namespace, group, (e) => {
          const s = seen(e.runId);
          if (e.status === 'queued' && e.requestId) {
            runOfRequest.set(e.requestId, e.runId);
            s.queuedAt ??= e.occurredAt;
          } else if (e.status === 'running') s.startedAt ??= e.occurredAt;
          else if (isTerminal(e.status) && s.endedAt === undefined) Object.assign(s, { endedAt: e.occurredAt, status: e.status });
        });
        // The bench's own watcher reads the outcomes, the same way for both paths.
        const producers = TENANTS.map((tenantId) => new SluiceProducer({ brokers: h.infra.kafkaBrokers, tenantId, secret, registry, namespace: p.namespace, followOutcomes: false, submitTimeoutMs: 30_000 }));
        // The request id as the watcher sees it on the status topic: bound to its tenant.
        const submit = (i: number) =>
          producers[i % producers.length]!.submit({ workflow: WORKFLOW, input: { message: 'Where is order 42?', orderId: String(i) }, idempotencyKey: randomUUID() }).then((r) => statusRequestId(TENANTS[i % TENANTS.length]!, r.requestId));
        const runOf = (requestId: string) => runOfRequest.get(requestId);
        try {
          const timeoutMs = o.phaseTimeoutSec * 1000;
          // Warm-up: the topics' leaders, the registry, both paths' code.
          for (let i = 0; i < 10; i++) {
            await p.runAll([runRequest(WORKFLOW, i)], PROBE_TIMEOUT_MS, 'warm-up');
            const id = await submit(i);
            await until(() => byRun.get(runOf(id) ?? '')?.endedAt !== undefined, PROBE_TIMEOUT_MS, 'ingress warm-up');
          }

          // Lone runs, the paths taking turns.
          const direct = { started: [] as number[] };
          const ingress = { queued: [] as number[], started: [] as number[] };
          const probes = async () => {
            for (let i = 0; i < o.probes; i++) {
              const run = runRequest(WORKFLOW, i);
              const t0 = Date.now();
              await p.runAll([run], PROBE_TIMEOUT_MS, 'direct probe');
              direct.started.push(byRun.get(run.runId)!.startedAt! - t0);
              const t1 = Date.now();
              const id = await submit(i);
              await until(() => byRun.get(runOf(id) ?? '')?.startedAt !== undefined, PROBE_TIMEOUT_MS, 'ingress probe');
              const s = byRun.get(runOf(id)!)!;
              ingress.queued.push(s.queuedAt! - t1);
              ingress.started.push(s.startedAt! - t1);
            }
          };
          await withTimeout(probes(), 2 * timeoutMs, 'latency probes');

          // Bursts: direct first, then the same number through the ingress.
          const runs = Array.from({ length: o.events }, (_, i) => runRequest(WORKFLOW, i));
          const d = await p.runAll(runs, timeoutMs, 'direct burst');
          const directTally = p.tally(runs.map((r) => r.runId));

          const startedAt = Date.now();
          const ids = await withTimeout(Promise.all(Array.from({ length: o.events }, (_, i) => submit(i))), timeoutMs, 'ingress burst submits');
          const remaining = () => timeoutMs - (Date.now() - startedAt);
          await until(() => ids.every((id) => runOf(id) !== undefined), remaining(), 'ingress burst queued');
          const ingressRuns = ids.map((id) => byRun.get(runOf(id)!)!);
          await until(() => ingressRuns.every((s) => s.endedAt !== undefined), remaining(), 'ingress burst finished');
          const lastQueued = Math.max(...ingressRuns.map((s) => s.queuedAt!));
          const lastEnded = Math.max(...ingressRuns.map((s) => s.endedAt!));

          const rate = (n: number, ms: number) => n / (Math.max(ms, 1) / 1000);
          const [directStarted, ingressQueued, ingressStarted] = [direct.started, ingress.queued, ingress.started].map(latencySummary);
          const result: { direct: PathFigures; ingress: PathFigures } = {
            direct: {
              events: o.events,
              onWorkTopicPerSec: rate(o.events, d.submittedAt - d.startedAt),
              runsDonePerSec: rate(o.events, d.finishedAt - d.startedAt),
              completed: directTally.completed ?? 0,
              startedP50Ms: directStarted!.p50,
              startedP99Ms: directStarted!.p99,
            },
            ingress: {
              events: o.events,
              onWorkTopicPerSec: rate(o.events, lastQueued - startedAt),
              runsDonePerSec: rate(o.events, lastEnded - startedAt),
              completed: ingressRuns.filter((s) => s.status === 'completed').length,
              queuedP50Ms: ingressQueued!.p50,
              queuedP99Ms: ingressQueued!.p99,
              startedP50Ms: ingressStarted!.p50,
              startedP99Ms: ingressStarted!.p99,
            },
          };
          return result;
        } finally {
          await Promise.allSettled(producers.map((pr) => pr.close()));
          await watcher.disconnect().catch(() => undefined);
          const admin = kafka.admin();
          await admin.connect();
          await admin.deleteGroups([group, groupId(p.namespace, 'ingress')]).catch(() => undefined);
          await admin.disconnect();
        }
      },
    );
  });
  report(figures, o);
}

function report(f: { direct: PathFigures; ingress: PathFigures }, o: IngressBenchOptions): void {
  const ratios = {
    onWorkTopicPerSec: f.ingress.onWorkTopicPerSec / f.direct.onWorkTopicPerSec,
    runsDonePerSec: f.ingress.runsDonePerSec / f.direct.runsDonePerSec,
    startedP50Ms: f.ingress.startedP50Ms / f.direct.startedP50Ms,
    startedP99Ms: f.ingress.startedP99Ms / f.direct.startedP99Ms,
  };
  if (o.json) {
    process.stdout.write(`${JSON.stringify({ bench: 'ingress', events: o.events, probes: o.probes, ...f, ratios })}\n`);
    return;
  }
  const n = (v: number | undefined, digits = 0) => (v === undefined ? '—' : v.toFixed(digits));
  const rows = [
    ['path', 'onto work topic/s', 'runs done/s', 'completed', 'queued p50/p99 ms', 'started p50/p99 ms'],
    ['direct (RunRequested)', n(f.direct.onWorkTopicPerSec), n(f.direct.runsDonePerSec), `${f.direct.completed}/${f.direct.events}`, '—', `${n(f.direct.startedP50Ms)} / ${n(f.direct.startedP99Ms)}`],
    ['ingress (SluiceProducer)', n(f.ingress.onWorkTopicPerSec), n(f.ingress.runsDonePerSec), `${f.ingress.completed}/${f.ingress.events}`, `${n(f.ingress.queuedP50Ms)} / ${n(f.ingress.queuedP99Ms)}`, `${n(f.ingress.startedP50Ms)} / ${n(f.ingress.startedP99Ms)}`],
    ['ingress ÷ direct', n(ratios.onWorkTopicPerSec, 2), n(ratios.runsDonePerSec, 2), '', '', `${n(ratios.startedP50Ms, 2)} / ${n(ratios.startedP99Ms, 2)}`],
  ];
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  process.stdout.write(`ingress vs straight to the work topic: ${o.events} runs per burst, ${o.probes} lone runs per path\n`);
  for (const r of rows) process.stdout.write(`${r.map((cell, c) => cell.padEnd(widths[c]!)).join('  ')}\n`);
}
