import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { Command, InvalidArgumentError } from 'commander';
import type { Admin } from 'kafkajs';
import { pino } from 'pino';
import type { SluiceConfig } from '../config/schema.js';
import { consumerGroups } from '../kafka/topics.js';
import { readPublishedReport, type PublishedReport } from '../lag/lag-monitor.js';
import { LagWindows, reportStatus, type LagReport } from '../lag/lag-report.js';
import { MIN_SAMPLES, exitCodeFor } from '../lag/lag-status.js';
import { lagJson, renderLagTable, type ReportSource } from '../lag/lag-table.js';
import { OffsetsReader } from '../lag/offsets-reader.js';
import { RecordReader } from '../lag/record-reader.js';
import { createLogger, type Logger } from '../obs/logger.js';
import { SharedClients } from '../roles/shared-clients.js';
import { withTimeout } from '../util/with-timeout.js';

/** `sluice lag`: consumer lag per group, topic and partition, for people and for cron jobs. */

/** Exit codes: the worst status's (0 OK, 1 WARN, 2 STALL, STOP, REWIND), and 2 for an error or a bad command line. */
export const LAG_EXIT_ERROR = 2;

const CONNECT_TIMEOUT_MS = 15_000;
const CLOSE_TIMEOUT_MS = 5_000;
const MAX_INTERVAL_MS = 600_000;

function parseInterval(raw: string): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < 100 || n > MAX_INTERVAL_MS) throw new InvalidArgumentError(`expected milliseconds from 100 to ${MAX_INTERVAL_MS}`);
  return n;
}

interface Shown {
  report: LagReport;
  source: ReportSource;
}

/**
 * Where the command's reports come from. The active lag monitor's last report, when Redis has one:
 * it is the role's own computation over its whole window, so the command pages on what the alerts
 * see. Without one (no monitor runs, or Redis is unreachable), the command measures Kafka itself
 * with the same code (OffsetsReader, RecordReader, LagWindows): two readings `interval` apart,
 * then one more per refresh with `--watch`, so its statuses firm up as its own window fills.
 */
class LagSession {
  private readonly clients: SharedClients;
  private readonly logger: Logger;
  private admin: Admin | undefined;
  private offsets: OffsetsReader | undefined;
  private reader: RecordReader | undefined;
  private readonly windows: LagWindows;
  private firstAt: number | undefined;

  constructor(private readonly config: SluiceConfig) {
    // stdout is the command's output: logs (kafkajs warnings among them) go to stderr.
    this.logger = createLogger('warn', 'sluice', pino.destination(2));
    this.clients = new SharedClients(config, this.logger);
    this.windows = new LagWindows({ windowMs: config.lagMonitor.windowMs, minSamples: MIN_SAMPLES });
  }

  async next(intervalMs: number): Promise<Shown> {
    const published = await this.published();
    if (typeof published !== 'string') return { report: published, source: { kind: 'monitor', instance: published.instance } };
    const report = await this.measure(intervalMs);
    return { report, source: { kind: 'command', spanMs: report.at - (this.firstAt ?? report.at), why: published } };
  }

  /** The monitor's report, or why there is none. */
  private async published(): Promise<PublishedReport | string> {
    try {
      const { redis } = this.clients;
      if (redis.status === 'wait') await redis.connect();
      return await readPublishedReport(redis, this.clients.keys);
    } catch (err) {
      return `Redis unreachable (${(err as Error).message}), so no lag monitor report`;
    }
  }

  private async measure(intervalMs: number): Promise<LagReport> {
    const offsets = await this.connect();
    const timeoutMs = this.config.lagMonitor.requestTimeoutMs;
    if (this.firstAt === undefined) {
      const first = await offsets.read();
      this.firstAt = first.at;
      this.windows.record(first);
      await new Promise((r) => setTimeout(r, intervalMs));
    }
    const reading = await offsets.read();
    this.windows.record(reading);
    return this.windows.report(reading, await this.reader!.timestamps(this.windows.recordRequests(reading), timeoutMs));
  }

  private async connect(): Promise<OffsetsReader> {
    if (this.offsets) return this.offsets;
    const { config } = this;
    const groups = consumerGroups(config.namespace);
    const topics = [...new Set(groups.flatMap((g) => g.topics))];
    const admin = this.clients.kafka.admin();
    this.admin = admin;
    await withTimeout(admin.connect(), CONNECT_TIMEOUT_MS, 'Kafka: connecting');
    const existing = new Set(await withTimeout(admin.listTopics(), CONNECT_TIMEOUT_MS, 'Kafka: listing topics'));
    const missing = topics.filter((t) => !existing.has(t));
    if (missing.length > 0) throw new Error(`no such topics in Kafka: ${missing.join(', ')} (is the namespace "${config.namespace}" right, and has Sluice started once?)`);
    // Joining the reader's group overlaps with the wait between the first two readings.
    this.reader = new RecordReader({
      kafka: this.clients.kafka,
      groupId: `${config.namespace}sluice.lag-cli.${hostname()}.${process.pid}.${randomBytes(4).toString('hex')}`,
      topics,
      sessionTimeoutMs: config.kafka.sessionTimeoutMs,
      heartbeatIntervalMs: config.kafka.heartbeatIntervalMs,
      logger: this.logger,
    });
    await withTimeout(this.reader.start(), CONNECT_TIMEOUT_MS, 'Kafka: starting the record reader');
    this.offsets = new OffsetsReader(admin, groups, config.lagMonitor.requestTimeoutMs);
    return this.offsets;
  }

  async close(): Promise<void> {
    await Promise.allSettled([this.reader?.stop(), this.admin?.disconnect(), this.clients.close()]);
  }
}

export interface LagCommandDeps {
  loadConfig: (path: string | undefined) => SluiceConfig;
}

interface LagOptions {
  config?: string;
  json?: boolean;
  watch?: boolean;
  interval: number;
}

async function runLag(deps: LagCommandDeps, o: LagOptions): Promise<never> {
  const session = new LagSession(deps.loadConfig(o.config));
  let code: number = LAG_EXIT_ERROR;
  let stopping = false;
  const onSignal = () => (stopping = true);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    do {
      const { report, source } = await session.next(o.interval);
      code = exitCodeFor(reportStatus(report));
      if (o.json) process.stdout.write(`${lagJson(report, source)}\n`);
      else process.stdout.write(`${o.watch && process.stdout.isTTY ? '\x1b[H\x1b[2J' : ''}${renderLagTable(report, source)}${o.watch && !process.stdout.isTTY ? '\n' : ''}`);
      if (o.watch && !stopping) await new Promise((r) => setTimeout(r, o.interval));
    } while (o.watch && !stopping);
  } catch (err) {
    process.stderr.write(`sluice lag: ${(err as Error).message}\n`);
    code = LAG_EXIT_ERROR;
  }
  await withTimeout(session.close(), CLOSE_TIMEOUT_MS, 'closing connections').catch(() => undefined);
  process.exit(code);
}

export function lagCommand(deps: LagCommandDeps): Command {
  return (
    new Command('lag')
      .description('consumer lag of every Sluice group (offsets, lag in messages and seconds, status); exit 0 OK, 1 WARN, 2 STALL/STOP/REWIND or an error')
      .option('-c, --config <file>', 'config file')
      .option('--json', 'JSON instead of a table (one line per refresh with --watch)')
      .option('--watch', 'refresh in place until Ctrl-C; exits with the last status')
      .option('--interval <ms>', 'refresh period with --watch; without a lag monitor also the gap between the first two readings', parseInterval, 2_000)
      // Commander exits 1 on a bad command line, which here means WARN: a usage error is 2.
      .exitOverride((err) => process.exit(err.exitCode === 0 ? 0 : LAG_EXIT_ERROR))
      .action((o: LagOptions) => runLag(deps, o))
  );
}
