import type { EachBatchPayload, Kafka, KafkaMessage } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import type { EventCodec } from '../../../src/events/codec.js';
import type { RunRequested } from '../../../src/events/schemas.js';
import { createLogger } from '../../../src/obs/logger.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { RunConsumer } from '../../../src/processors/run-consumer.js';
import type { RunPermitSource } from '../../../src/permits/run-permit-source.js';
import type { DispatchBreakers } from '../../../src/processors/breaker-holds.js';
import { InfrastructureError, type RunFailure } from '../../../src/execution/run-faults.js';

const TOPIC = 'sluice.runs.interactive';

/** Just enough of a kafkajs consumer to drive `RunConsumer` by hand: batches in, pauses, resumes and commits out. */
function fakeKafka() {
  const seen = {
    eachBatch: undefined as ((p: EachBatchPayload) => Promise<void>) | undefined,
    onJoin: undefined as ((e: { payload: { memberAssignment: Record<string, number[]> } }) => void) | undefined,
    paused: new Set<number>(),
    commits: [] as { topic: string; partition: number; offset: string }[],
  };
  const consumer = {
    events: { GROUP_JOIN: 'consumer.group_join' },
    on: (event: string, listener: (e: { payload: { memberAssignment: Record<string, number[]> } }) => void) => {
      if (event === 'consumer.group_join') seen.onJoin = listener;
    },
    connect: async () => undefined,
    subscribe: async () => undefined,
    run: async (opts: { eachBatch: (p: EachBatchPayload) => Promise<void> }) => void (seen.eachBatch = opts.eachBatch),
    pause: (tps: { partitions: number[] }[]) => tps.forEach((tp) => tp.partitions.forEach((p) => seen.paused.add(p))),
    resume: (tps: { partitions: number[] }[]) => tps.forEach((tp) => tp.partitions.forEach((p) => seen.paused.delete(p))),
    commitOffsets: async (offsets: { topic: string; partition: number; offset: string }[]) => void seen.commits.push(...offsets),
    stop: async () => undefined,
    disconnect: async () => undefined,
  };
  return { kafka: { consumer: () => consumer } as unknown as Kafka, seen };
}

function run(i: number, tenantId = 'tenant-a'): RunRequested {
  const now = Date.now();
  return { runId: `run-${i}`, tenantId, workflow: 'support-reply', class: 'interactive', admittedAt: now, deadline: now + 60_000, attempt: 1, traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', input: '{}', idempotencyKey: null, dueAt: null };
}

const message = (offset: number, r: RunRequested): KafkaMessage => ({ offset: String(offset), key: Buffer.from(r.tenantId), value: Buffer.from(JSON.stringify(r)), timestamp: '0', attributes: 0, headers: {} }) as KafkaMessage;

/** Permits always granted, and every request remembered. */
function grantingPermits() {
  const asked: string[] = [];
  const source: RunPermitSource = {
    tryAcquire: async (r) => (asked.push(r.runId), { granted: true, permits: { release: async () => undefined } }),
    onWake: () => () => undefined,
  };
  return { source, asked };
}

async function until(check: () => boolean, what: string, timeoutMs = 3_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

let consumer: RunConsumer | undefined;
afterEach(async () => {
  await consumer?.stop(0);
  consumer = undefined;
});

function setup(execute: (r: RunRequested) => Promise<unknown>, permits: RunPermitSource = grantingPermits().source, breakers?: DispatchBreakers) {
  const config = loadConfig({ env: {} });
  config.processor.partitionBuffer = 4;
  config.processor.infraRetry = { maxAttempts: 2, baseMs: 5, capMs: 10 };
  const { kafka, seen } = fakeKafka();
  const metrics = createMetrics();
  const ended: { runId: string; failure: RunFailure }[] = [];
  consumer = new RunConsumer({
    kafka,
    config,
    codec: { decode: async (value: Buffer) => JSON.parse(value.toString()) } as unknown as EventCodec,
    deadLetters: { publishDeadLetter: async () => undefined },
    execute,
    deadLetterRun: async (r, _context, failure) => void ended.push({ runId: r.runId, failure }),
    permits,
    ...(breakers ? { breakers } : {}),
    logger: createLogger('silent'),
    metrics,
  });
  const feed = async (messages: KafkaMessage[]) => {
    const resolved: string[] = [];
    await seen.eachBatch!({
      batch: { topic: TOPIC, partition: 0, messages },
      resolveOffset: (o: string) => void resolved.push(o),
      heartbeat: async () => undefined,
      isRunning: () => true,
      isStale: () => false,
    } as unknown as EachBatchPayload);
    return resolved;
  };
  const committed = () => seen.commits.filter((c) => c.partition === 0).at(-1)?.offset;
  return { consumer, seen, ended, feed, committed, metrics };
}

describe('RunConsumer when runs fail on the infrastructure', () => {
  it('a partition paused by runs that keep failing resumes, and commits, once they are dead-lettered', async () => {
    const kafkaDown = () => Promise.reject(new InfrastructureError('outcome_publish', undefined, new Error('KafkaJSNumberOfRetriesExceeded')));
    const s = setup(kafkaDown);
    await s.consumer.start();
    const runs = Array.from({ length: 6 }, (_, i) => run(i));
    const resolved = await s.feed(runs.map((r, i) => message(i, r)));
    // The buffer holds 4: the partition is paused and the rest is fetched again later.
    expect(resolved).toEqual(['0', '1', '2', '3']);
    expect(s.seen.paused.has(0)).toBe(true);
    await until(() => s.ended.length === 4 && !s.seen.paused.has(0) && s.committed() === '4', 'the four to be dead-lettered, the partition resumed and committed');
    expect(s.ended[0]!.failure).toMatchObject({ reason: 'infrastructure_error', message: 'gave up after 2 failed attempts: publishing the run outcome (Kafka) failed: KafkaJSNumberOfRetriesExceeded' });
    await s.feed([message(4, runs[4]!), message(5, runs[5]!)]);
    await until(() => s.committed() === '6', 'every offset to be committed');
    expect(s.ended.map((e) => e.runId).sort()).toEqual(runs.map((r) => r.runId).sort());
  });

  it('a run that failed on a blip runs again and completes; its offset commits and nothing is dead-lettered', async () => {
    let attempts = 0;
    const s = setup(async () => {
      if (++attempts === 1) throw new InfrastructureError('breaker_admission', 'anthropic', new Error('Connection is closed.'));
    });
    await s.consumer.start();
    await s.feed([message(0, run(0))]);
    await until(() => s.committed() === '1', 'the offset to be committed');
    expect(attempts).toBe(2);
    expect(s.ended).toEqual([]);
  });

  it('dead-letters a run of a tenant removed from the config at once, without asking for permits, and commits past it', async () => {
    const permits = grantingPermits();
    const executed: string[] = [];
    const s = setup(async (r) => void executed.push(r.runId), permits.source);
    await s.consumer.start();
    await s.feed([message(0, run(0, 'tenant-removed')), message(1, run(1))]);
    await until(() => s.committed() === '2', 'both offsets to be committed');
    expect(s.ended).toEqual([{ runId: 'run-0', failure: { reason: 'unknown_tenant', code: 'unknown_tenant', message: 'tenant "tenant-removed" is not configured on this processor', retryable: false } }]);
    expect(permits.asked).toEqual(['run-1']);
    expect(executed).toEqual(['run-1']);
  });
});

describe('RunConsumer across rebalances', () => {
  it('resumes a partition it paused and lost, so it is fetched again should it come back', async () => {
    const s = setup(() => new Promise(() => undefined));
    await s.consumer.start();
    await s.feed(Array.from({ length: 5 }, (_, i) => message(i, run(i))));
    expect(s.seen.paused.has(0)).toBe(true);
    s.seen.onJoin!({ payload: { memberAssignment: { [TOPIC]: [1] } } });
    // kafkajs keeps a pause across assignments: left paused, the partition would never be read here again.
    expect(s.seen.paused.has(0)).toBe(false);
  });
});

describe('RunConsumer reporting held runs', () => {
  it('reports held runs per dependency, tenant and class, and a released series reads 0 instead of vanishing', async () => {
    let open = true;
    const listeners = new Set<() => void>();
    const breakers: DispatchBreakers = {
      gate: () => (open ? { kind: 'wait', dependency: 'anthropic', until: Date.now() + 60_000 } : { kind: 'go' }),
      probedBy: () => [],
      onChange: (l) => (listeners.add(l), () => listeners.delete(l)),
    };
    const executed: string[] = [];
    const s = setup(async (r) => void executed.push(r.runId), grantingPermits().source, breakers);
    await s.consumer.start();
    await s.feed([message(0, run(0)), message(1, run(1)), message(2, { ...run(2, 'tenant-b'), class: 'batch' })]);
    const held = async () => (await s.metrics.runsHeld.get()).values.map((v) => ({ ...v.labels, runs: v.value })).sort((a, b) => String(a.tenant).localeCompare(String(b.tenant)));
    await until(() => executed.length === 0 && s.seen.paused.has(0), 'the partition to be paused with all its runs held');
    expect(await held()).toEqual([
      { dependency: 'anthropic', tenant: 'tenant-a', class: 'interactive', runs: 2 },
      { dependency: 'anthropic', tenant: 'tenant-b', class: 'batch', runs: 1 },
    ]);
    open = false;
    for (const l of listeners) l();
    await until(() => executed.length === 3, 'the released runs to execute');
    await until(() => !s.seen.paused.has(0), 'the partition to resume');
    expect(await held()).toEqual([
      { dependency: 'anthropic', tenant: 'tenant-a', class: 'interactive', runs: 0 },
      { dependency: 'anthropic', tenant: 'tenant-b', class: 'batch', runs: 0 },
    ]);
  });
});
