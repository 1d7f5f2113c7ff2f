import { join } from 'node:path';
import type { Admin, Kafka } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { EventCodec } from '../../src/events/codec.js';
import { FileSchemaRegistry } from '../../src/events/file-schema-registry.js';
import type { RunStatus } from '../../src/events/schemas.js';
import { createKafka } from '../../src/kafka/client.js';
import { groupId, topicNames } from '../../src/kafka/topics.js';
import { createLogger } from '../../src/obs/logger.js';
import { EventProducer } from '../../src/producers/event-producer.js';
import { newRunId } from '../../src/runs/run-id.js';
import { heldSequence, stepSequence } from '../../src/runs/status-sequence.js';
import { packageRoot } from '../../src/util/package-root.js';
import { sample } from '../support/metric-value.js';
import { statusEvent } from '../support/status-event.js';
import { TENANT_A_KEY, eventually, freePort, http, runCli, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from './harness.js';

/**
 * The lag-monitor role against real Kafka and Redis, with a short window (12 s, polls every
 * 500 ms). The API, sinks and simulator run in one process; processors and lag monitors in their
 * own, started and stopped as each step needs. Runs are tenant-a's, so they land on one partition.
 */

const WINDOW_MS = 12_000;
const LAG_MONITOR = { intervalMs: 500, windowMs: WINDOW_MS, leaseMs: 2_000, requestTimeoutMs: 3_000 };
const PARTITIONS = { interactive: 2, batch: 1, retry: 1, status: 1, dlq: 1 };
const STATUS = { OK: 0, WARN: 1, STALL: 2, STOP: 3, REWIND: 4 } as const;

const ns = testNamespace('lag');
const topics = topicNames(ns);
const processorGroup = groupId(ns, 'processor');

interface Monitor {
  process: SluiceProcess;
  metrics: string;
}

let configPath: string;
let api: string;
let kafka: Kafka;
let admin: Admin;
const running = new Set<SluiceProcess>();

async function start(roles: string, env: Record<string, string> = {}): Promise<SluiceProcess> {
  const p = await startSluice({ configPath, roles, namespace: ns, env });
  running.add(p);
  return p;
}

async function stop(p: SluiceProcess): Promise<void> {
  expect(await p.stop()).toBe(0);
  running.delete(p);
}

async function startMonitor(): Promise<Monitor> {
  const port = await freePort();
  return { process: await start('lag-monitor', { SLUICE_OPS_PORT: String(port) }), metrics: `http://127.0.0.1:${port}/metrics` };
}

const scrape = (m: Monitor) => fetch(m.metrics, { signal: AbortSignal.timeout(5_000) }).then((r) => r.text());

/** The processor group's per-partition values of a series on the interactive topic. */
function perPartition(text: string, metric: string): Map<number, number> {
  const out = new Map<number, number>();
  const re = new RegExp(`^${metric}\\{group="${processorGroup.replace(/\./g, '\\.')}",topic="${topics.interactive.replace(/\./g, '\\.')}",partition="(\\d+)"\\} (\\S+)$`, 'gm');
  for (const m of text.matchAll(re)) out.set(Number(m[1]), Number(m[2]));
  return out;
}

const groupStatus = (text: string) => sample(text, `sluice_consumer_group_status{group="${processorGroup}"}`);

async function submit(n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const r = await http(`${api}/v1/runs`, { method: 'POST', key: TENANT_A_KEY, json: { workflow: 'support-reply', input: { message: `lag ${i}`, orderId: String(i) } } });
    expect(r.status).toBe(202);
  }
}

/** `sluice lag --json` for the namespace, parsed, with its exit code. */
async function lagCommand(): Promise<{ code: number | null; report: any; stderr: string }> {
  const r = await runCli(['lag', '--json', '--config', configPath], ns);
  return { code: r.code, report: r.stdout ? JSON.parse(r.stdout) : undefined, stderr: r.stderr };
}

/** What retention does: the records of an interactive partition before `offset` are deleted, the low watermark moves to it. */
async function deleteRecordsBelow(partition: number, offset: bigint): Promise<void> {
  await admin.fetchTopicMetadata({ topics: [topics.interactive] });
  await admin.deleteTopicRecords({ topic: topics.interactive, partitions: [{ partition, offset: String(offset) }] });
}

const processorRow = (report: any, partition: number) => report.groups.find((g: any) => g.group === processorGroup).partitions.find((p: any) => p.topic === topics.interactive && p.partition === partition);

describe('lag monitor', () => {
  let monitor: Monitor;
  /** The interactive partition tenant-a's runs land on. */
  let partition: number;

  beforeAll(async () => {
    const [apiPort, simPort] = [await freePort(), await freePort()];
    configPath = writeTestConfig({ api: { port: apiPort }, simulator: { port: simPort }, kafka: { partitions: PARTITIONS }, lagMonitor: LAG_MONITOR });
    api = `http://127.0.0.1:${apiPort}`;
    await start('provider-sim,api,status-sink,dlq-sink');
    monitor = await startMonitor();
    const infra = inject('infra');
    kafka = createKafka(loadConfig({ env: { KAFKA_BROKERS: infra.kafkaBrokers.join(',') } }).kafka, createLogger('warn'), 'lag-test');
    admin = kafka.admin();
    await admin.connect();
  });

  afterAll(async () => {
    for (const p of running) await p.stop();
    await admin?.disconnect();
  });

  it('exports every Sluice group, a group no consumer ever joined with 0 members, and all partitions at 0 before any work', async () => {
    const text = await eventually(async () => {
      const t = await scrape(monitor);
      return sample(t, 'sluice_lag_monitor_active') === 1 && perPartition(t, 'sluice_consumer_lag_messages').size === PARTITIONS.interactive ? t : undefined;
    }, 20_000, 'the monitor to become active and export lag');
    for (const role of ['processor', 'retry-forwarder', 'status-sink', 'dlq-sink'] as const) expect(text).toMatch(new RegExp(`^sluice_consumer_group_members\\{group="${groupId(ns, role).replace(/\./g, '\\.')}"\\} \\d+$`, 'm'));
    expect(sample(text, `sluice_consumer_group_members{group="${processorGroup}"}`)).toBe(0);
    expect([...perPartition(text, 'sluice_consumer_lag_messages').values()]).toEqual([0, 0]);
    expect(sample(text, 'sluice_retry_topic_depth_messages')).toBe(0);
    expect(sample(text, 'sluice_admission_backlog_runs{tenant="tenant-a",class="interactive"}')).toBe(0);
  });

  it('counts runs waiting for a dependency cluster-wide, from their status events as the status sink records them', async () => {
    const producer = await EventProducer.connect(kafka, new EventCodec(new FileSchemaRegistry(join(packageRoot(), '.sluice', 'schema-registry'))), topics);
    const now = Date.now();
    const runId = newRunId(now);
    const event = (sequence: number, status: RunStatus) => statusEvent({ runId, sequence, status, tenantId: 'tenant-b', admittedAt: now, deadline: now + 600_000, occurredAt: Date.now() });
    const waiting = async () => sample(await scrape(monitor), 'sluice_runs_waiting_dependency{tenant="tenant-b",class="batch"}');
    try {
      await producer.publishStatus(event(heldSequence(1), 'waiting_dependency'), 10_000);
      await eventually(async () => ((await waiting()) === 1 ? true : undefined), 15_000, 'one run waiting');
      expect(sample(await scrape(monitor), 'sluice_runs_waiting_dependency{tenant="tenant-b",class="interactive"}')).toBe(0);
      await producer.publishStatus(event(stepSequence(1, 0), 'running'), 10_000);
      await eventually(async () => ((await waiting()) === 0 ? true : undefined), 15_000, 'no run waiting');
    } finally {
      await producer.close();
    }
  });

  it('with no processor, lag reaches the runs submitted, counted from the low watermark of a partition never committed', async () => {
    await submit(6);
    const lags = await eventually(async () => {
      const l = perPartition(await scrape(monitor), 'sluice_consumer_lag_messages');
      return [...l.values()].reduce((a, b) => a + b, 0) === 6 ? l : undefined;
    }, 15_000, 'lag 6 on the interactive topic');
    partition = [...lags].find(([, v]) => v === 6)![0];
    // Retention-style deletion moves the low watermark: a group that never committed resumes there.
    await deleteRecordsBelow(partition, 2n);
    const text = await eventually(async () => {
      const t = await scrape(monitor);
      return perPartition(t, 'sluice_consumer_lag_messages').get(partition) === 4 ? t : undefined;
    }, 10_000, 'lag 4 once records 0 and 1 are deleted');
    expect(sample(text, 'sluice_admission_backlog_runs{tenant="tenant-a",class="interactive"}')).toBe(6);
    expect(sample(text, 'sluice_admission_backlog_oldest_age_seconds{tenant="tenant-a",class="interactive"}')).toBeGreaterThan(0);
    const { report } = await lagCommand();
    expect(report.source).toMatchObject({ kind: 'monitor' });
    expect(processorRow(report, partition)).toMatchObject({ committed: null, low: '2', high: '6', lagMessages: '4', timeSource: 'record' });
  });

  it('lag in seconds is the age of the record at the resume offset, and grows with time', async () => {
    const seconds = async () => perPartition(await scrape(monitor), 'sluice_consumer_lag_seconds').get(partition)!;
    const first = await seconds();
    const t0 = Date.now();
    await new Promise((r) => setTimeout(r, 3_000));
    const second = await seconds();
    const elapsed = (Date.now() - t0) / 1000;
    expect(first).toBeGreaterThan(0);
    // One poll interval of slack either way: each scrape shows the last poll's value.
    expect(second - first).toBeGreaterThan(elapsed - 1);
    expect(second - first).toBeLessThan(elapsed + 1);
  });

  it('the group goes STALL once the offset stood still for half the window, then STOP after the whole window; `sluice lag` exits 2', async () => {
    const seen: number[] = [];
    await eventually(async () => {
      const s = groupStatus(await scrape(monitor));
      if (s !== undefined && seen[seen.length - 1] !== s) seen.push(s);
      return s === STATUS.STOP ? s : undefined;
    }, WINDOW_MS + 15_000, 'STOP', 200);
    expect(seen.slice(-2)).toEqual([STATUS.STALL, STATUS.STOP]);
    expect(perPartition(await scrape(monitor), 'sluice_consumer_partition_status').get(partition)).toBe(STATUS.STOP);
    const { code, report } = await lagCommand();
    expect(code).toBe(2);
    expect(report.status).toBe('STOP');
  });

  it('a processor started drains it: lag 0, status OK, `sluice lag` exits 0', async () => {
    const processor = await start('processor');
    try {
      const text = await eventually(async () => {
        const t = await scrape(monitor);
        return perPartition(t, 'sluice_consumer_lag_messages').get(partition) === 0 && groupStatus(t) === STATUS.OK ? t : undefined;
      }, 60_000, 'the processor group to catch up');
      expect(sample(text, `sluice_consumer_group_members{group="${processorGroup}"}`)).toBe(1);
      expect(perPartition(text, 'sluice_consumer_lag_seconds').get(partition)).toBe(0);
      const { code, report } = await lagCommand();
      expect(report.status).toBe('OK');
      expect(code).toBe(0);
    } finally {
      await stop(processor);
    }
    // The 4 runs that ran leave the backlog once the status sink saw them end; the 2 deleted before
    // any processor read them stay until their lease lapses.
    await eventually(async () => (sample(await scrape(monitor), 'sluice_admission_backlog_runs{tenant="tenant-a",class="interactive"}') === 2 ? true : undefined), 20_000, 'a backlog of 2');
  });

  it('runs arriving behind the stopped processor make lag grow: WARN, `sluice lag` exits 1', async () => {
    // WARN needs lag that never fell across the window: first the drain leaves it.
    await new Promise((r) => setTimeout(r, WINDOW_MS));
    await submit(3);
    await eventually(async () => (groupStatus(await scrape(monitor)) === STATUS.WARN ? true : undefined), 5_000, 'WARN', 100);
    // WARN holds until the offset has stood still with lag for half the window: then STALL.
    const { code, report } = await lagCommand();
    expect(report.status).toBe('WARN');
    expect(code).toBe(1);
  });

  it('a record deleted past the committed offset: time lag is interpolated from the window, lag still counts it', async () => {
    const before = processorRow((await lagCommand()).report, partition);
    const committed = BigInt(before.committed);
    await deleteRecordsBelow(partition, committed + 2n);
    const row = await eventually(async () => {
      const r = processorRow((await lagCommand()).report, partition);
      return r.low === String(committed + 2n) ? r : undefined;
    }, 10_000, 'the new low watermark');
    expect(row).toMatchObject({ committed: String(committed), lagMessages: '3', timeSource: 'interpolated' });
    expect(row.lagSeconds).toBeGreaterThan(0);
  });

  it('wrote no offset for any group: the monitored ones unchanged, its record reader\'s group none', async () => {
    const groups = (await admin.listGroups()).groups.map((g) => g.groupId).filter((g) => g.startsWith(ns));
    const readers = groups.filter((g) => g.includes('lag-monitor.reader') || g.includes('lag-cli'));
    expect(readers.length).toBeGreaterThan(0);
    for (const g of readers) {
      for (const t of await admin.fetchOffsets({ groupId: g, topics: Object.values(topics) })) {
        for (const p of t.partitions) expect(p.offset).toBe('-1');
      }
    }
    const committed = await admin.fetchOffsets({ groupId: processorGroup, topics: [topics.interactive] });
    expect(committed[0]!.partitions.find((p) => p.partition === partition)!.offset).toBe('6');
  });

  it('two monitors: one active, the other exports nothing; the other takes over when the active one stops, or dies', async () => {
    const second = await startMonitor();
    await new Promise((r) => setTimeout(r, 2 * LAG_MONITOR.leaseMs));
    const [a, b] = [await scrape(monitor), await scrape(second)];
    expect(sample(a, 'sluice_lag_monitor_active')).toBe(1);
    expect(sample(b, 'sluice_lag_monitor_active')).toBe(0);
    expect(b).not.toMatch(/^sluice_(consumer_|retry_topic_depth|admission_backlog_runs|admission_backlog_oldest|runs_waiting)/m);
    expect(a).toMatch(/^sluice_consumer_lag_messages\{/m);

    // A graceful stop gives the lease back: the standby takes it at its next refresh.
    await stop(monitor.process);
    await eventually(async () => {
      const t = await scrape(second);
      return sample(t, 'sluice_lag_monitor_active') === 1 && perPartition(t, 'sluice_consumer_lag_messages').size > 0 ? t : undefined;
    }, LAG_MONITOR.leaseMs + 5_000, 'the second monitor to take over');

    // A killed one does not: the third waits for its lease to lapse.
    const third = await startMonitor();
    await second.process.kill9();
    running.delete(second.process);
    const t0 = Date.now();
    await eventually(async () => (sample(await scrape(third), 'sluice_lag_monitor_active') === 1 ? true : undefined), LAG_MONITOR.leaseMs + 5_000, 'the third monitor to take over');
    expect(Date.now() - t0).toBeLessThan(LAG_MONITOR.leaseMs + 3_000);
    monitor = third;
  });

  it('without a lag monitor, `sluice lag` measures Kafka itself and says so', async () => {
    await stop(monitor.process);
    // The last report expires three polls after it was written.
    await new Promise((r) => setTimeout(r, 3 * LAG_MONITOR.intervalMs + 500));
    const { code, report } = await lagCommand();
    expect(report.source).toMatchObject({ kind: 'command', why: 'no active lag monitor' });
    expect(processorRow(report, partition)).toMatchObject({ committed: '6', lagMessages: '3', timeSource: 'interpolated' });
    // Two readings a moment apart judge no trend: the stuck partition reads OK here.
    expect(report.status).toBe('OK');
    expect(code).toBe(0);
  });

  it('`sluice lag` exits 2 on an error (a namespace without Sluice\'s topics) and on a bad command line', async () => {
    const missing = await runCli(['lag', '--config', configPath], testNamespace('lag-none'));
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('no such topics in Kafka');
    const usage = await runCli(['lag', '--interval', 'soon'], ns);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain('--interval');
  });
});
