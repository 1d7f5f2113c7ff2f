import cliProgress from 'cli-progress';
import { Command, Option } from 'commander';
import { pino } from 'pino';
import type { SluiceConfig } from '../config/schema.js';
import { DEFAULT_LIST_LIMIT, DeadLetterStore, type StatsBucket } from '../dlq/dead-letter-store.js';
import { emptyTally, type ReplayResult, type ReplayTally } from '../dlq/replay-outcome.js';
import { ReplayConnection } from '../dlq/replay-connection.js';
import { DeadLetterReplayer, type ReplayKafka } from '../dlq/replay-runner.js';
import { DEFAULT_REPLAY_RATE } from '../dlq/replay-pacer.js';
import { topicNames } from '../kafka/topics.js';
import { createLogger } from '../obs/logger.js';
import { SharedClients } from '../roles/shared-clients.js';
import { withTimeout } from '../util/with-timeout.js';
import { addFilterOptions, collectIds, defaultWho, FILTER_OPTIONS, filterFrom, nonEmpty, parseId, parseRate, parseWhen, UsageError, type FilterOptions } from './dlq-arguments.js';
import { outcomeLine, rowJson, summaryLine } from '../dlq/replay-text.js';
import { formatRow, formatStats, listTable } from './dlq-output.js';

/** `sluice dlq`: the operator's view of the DLQ archive (Postgres), and the way back to work topics. */

export interface DlqExitCodes {
  ok: number;
  /** A runtime failure: Postgres or Kafka unreachable, or some replays failed. */
  failure: number;
  /** A bad command line: unknown option, bad value, a required option missing. */
  usage: number;
  /** Some of the given rows were not found, not pending or refused; the others were handled. */
  partial: number;
}

export interface DlqCommandDeps {
  /** Loads the config as every command does (exits on a bad one). */
  loadConfig: (path: string | undefined) => SluiceConfig;
  exit: DlqExitCodes;
}

const CLOSE_TIMEOUT_MS = 5_000;

/** A failure may go away when run again (1); a skip or a refusal will not (3). */
export function exitFor(t: ReplayTally, exit: DlqExitCodes): number {
  if (t.failed > 0) return exit.failure;
  return t.refused > 0 || Object.values(t.skipped).some((n) => n > 0) ? exit.partial : exit.ok;
}

const write = (stream: NodeJS.WriteStream, text: string) => stream.write(text.endsWith('\n') ? text : `${text}\n`);

/** A bar on a terminal; otherwise a line per row, which is what a log or a pipe can use. */
function replayProgress(total: number): { report: (o: ReplayResult) => void; stop: () => void } {
  if (!process.stderr.isTTY) return { report: (o) => write(process.stderr, outcomeLine(o, false)), stop: () => undefined };
  const bar = new cliProgress.SingleBar({ stream: process.stderr, format: 'replaying [{bar}] {value}/{total} | {eta_formatted} left', hideCursor: true }, cliProgress.Presets.shades_classic);
  const failures: string[] = [];
  bar.start(total, 0);
  return {
    report: (o) => {
      if (o.result === 'failed' || o.result === 'refused') failures.push(outcomeLine(o, false));
      bar.increment();
    },
    stop: () => {
      bar.stop();
      for (const line of failures) write(process.stderr, line);
    },
  };
}

/** What one invocation connects to, each on first use, and closes once. */
class Session {
  private readonly clients: SharedClients;
  private replayConnection?: ReplayConnection;

  constructor(
    readonly config: SluiceConfig,
    readonly exitCodes: DlqExitCodes,
  ) {
    // stdout is the command's output: logs (kafkajs warnings among them) go to stderr.
    this.clients = new SharedClients(config, createLogger('warn', 'sluice', pino.destination(2)));
  }

  /** Connects and applies pending migrations, like every role does. */
  async store(): Promise<DeadLetterStore> {
    try {
      return new DeadLetterStore(await this.clients.pool(), { statementTimeoutMs: this.config.postgres.statementTimeoutMs, namespace: this.config.namespace });
    } catch (err) {
      throw new Error(`Postgres: ${(err as Error).message}`, { cause: err });
    }
  }

  async replayer(): Promise<DeadLetterReplayer> {
    return new DeadLetterReplayer(await this.store(), this.clients.codec, topicNames(this.config.namespace));
  }

  /** A producer and the topics that exist: a replay never creates topics, a wrong namespace must not go unnoticed. */
  async connectKafka(): Promise<ReplayKafka> {
    this.replayConnection ??= new ReplayConnection(this.clients.kafka, this.config.kafka.produceTimeoutMs);
    return this.replayConnection.get();
  }

  async close(): Promise<void> {
    await Promise.allSettled([this.replayConnection?.close(), this.clients.close()]);
  }
}

interface ListOptions extends FilterOptions {
  json?: boolean;
}

async function list(s: Session, o: ListOptions): Promise<number> {
  const filter = filterFrom(o);
  const rows = await (await s.store()).list(filter);
  if (o.json) write(process.stdout, JSON.stringify(rows, null, 2));
  else write(process.stdout, rows.length > 0 ? listTable(rows) : 'no dead letters match');
  if (rows.length === (filter.limit ?? DEFAULT_LIST_LIMIT)) write(process.stderr, `showing the newest ${rows.length}; there may be more (--limit)`);
  return s.exitCodes.ok;
}

async function show(s: Session, id: string, o: { json?: boolean }): Promise<number> {
  const row = await (await s.store()).get(id);
  if (!row) {
    write(process.stderr, `sluice dlq: no dead letter #${id}`);
    return s.exitCodes.partial;
  }
  write(process.stdout, o.json ? JSON.stringify(rowJson(row), null, 2) : formatRow(row));
  return s.exitCodes.ok;
}

interface ReplayOptions extends Omit<FilterOptions, 'status'> {
  dryRun?: boolean;
  rate: number;
  by: string;
  yes?: boolean;
}

async function replay(s: Session, ids: string[] | undefined, o: ReplayOptions): Promise<number> {
  const byIds = ids !== undefined && ids.length > 0;
  const given = FILTER_OPTIONS.filter((k) => k !== 'status' && o[k] !== undefined);
  if (byIds && given.length > 0) throw new UsageError(`give ids or filters (--${given.join(', --')}), not both`);
  if (!byIds && !o.yes && !o.dryRun) throw new UsageError('replaying every pending row a filter matches needs --yes (see what it would take with --dry-run)');
  const filter = filterFrom(o);
  const replayer = await s.replayer();
  const targets = byIds ? [...new Set(ids)] : await replayer.pendingIds(filter);
  if (!byIds && targets.length === (filter.limit ?? DEFAULT_LIST_LIMIT)) write(process.stderr, `taking the newest ${targets.length} matching rows; run again for more (--limit)`);
  let tally = emptyTally();
  if (o.dryRun) {
    tally = await replayer.preview(targets, (outcome) => write(process.stdout, outcomeLine(outcome, true)));
  } else if (targets.length > 0) {
    const kafka = await s.connectKafka();
    const progress = replayProgress(targets.length);
    const done = await replayer.replay(targets, kafka, { by: o.by, ratePerSec: o.rate, onOutcome: progress.report });
    progress.stop();
    if (done.untried > 0) write(process.stderr, `sluice dlq: stopped as Kafka did not answer; ${done.untried} more rows left pending, untried`);
    tally = done.tally;
  }
  write(process.stdout, summaryLine(tally, o.dryRun === true));
  return exitFor(tally, s.exitCodes);
}

async function discard(s: Session, ids: string[], o: { reason: string; by: string }): Promise<number> {
  const result = await (await s.store()).discard(ids, o.by, o.reason);
  if (result.discarded.length > 0) write(process.stdout, `discarded ${result.discarded.map((id) => `#${id}`).join(', ')}`);
  for (const id of result.notFound) write(process.stderr, `not discarded #${id}: not found`);
  for (const { id, status } of result.notPending) write(process.stderr, `not discarded #${id}: ${status}, not pending`);
  return result.notFound.length + result.notPending.length > 0 ? s.exitCodes.partial : s.exitCodes.ok;
}

async function stats(s: Session, o: { since?: Date; bucket: StatsBucket; json?: boolean }): Promise<number> {
  const result = await (await s.store()).stats({ since: o.since, bucket: o.bucket });
  write(process.stdout, o.json ? JSON.stringify(result, null, 2) : formatStats(result));
  return s.exitCodes.ok;
}

export function dlqCommand(deps: DlqCommandDeps): Command {
  /** Runs a subcommand and exits with its code once every connection is closed. */
  const run = async (configPath: string | undefined, body: (s: Session) => Promise<number>): Promise<void> => {
    const session = new Session(deps.loadConfig(configPath), deps.exit);
    let code: number;
    try {
      code = await body(session);
    } catch (err) {
      write(process.stderr, `sluice dlq: ${(err as Error).message}`);
      code = err instanceof UsageError ? deps.exit.usage : deps.exit.failure;
    }
    await withTimeout(session.close(), CLOSE_TIMEOUT_MS, 'closing connections').catch(() => undefined);
    process.exit(code);
  };

  const dlq = new Command('dlq')
    .description('inspect, replay and discard dead letters archived in Postgres')
    // Commander exits 1 on a bad command line; scripts tell usage errors by exit code 2.
    .exitOverride((err) => process.exit(err.exitCode === 0 ? deps.exit.ok : deps.exit.usage));
  const sub = (name: string, description: string) => dlq.command(name).description(description).option('-c, --config <file>', 'config file');

  addFilterOptions(sub('list', 'dead letters, newest first'), { status: true })
    .option('--json', 'JSON instead of a table')
    .action((o: ListOptions & { config?: string }) => run(o.config, (s) => list(s, o)));

  sub('show', 'every field of one dead letter, its decoded payload, headers, error and stack')
    .argument('<id>', 'dead letter id', parseId)
    .option('--json', 'JSON (payload and key in base64)')
    .action((id: string, o: { json?: boolean; config?: string }) => run(o.config, (s) => show(s, id, o)));

  addFilterOptions(sub('replay', 'produce pending dead letters again: runs as their next attempt, poison as it was'), { status: false })
    .argument('[ids...]', 'dead letter ids (or use filters)', collectIds)
    .option('--dry-run', 'print what would be replayed; change nothing')
    .option('--rate <n/s>', 'rows per second', parseRate, DEFAULT_REPLAY_RATE)
    .option('--by <who>', 'recorded as replayed_by', nonEmpty, defaultWho())
    .option('--yes', 'replay every pending row the filters match')
    .action((ids: string[] | undefined, o: ReplayOptions & { config?: string }) => run(o.config, (s) => replay(s, ids, o)));

  sub('discard', 'mark pending dead letters as never to be replayed')
    .argument('<ids...>', 'dead letter ids', collectIds)
    .requiredOption('--reason <text>', 'why (recorded with the row)', nonEmpty)
    .option('--by <who>', 'recorded as discarded_by', nonEmpty, defaultWho())
    .action((ids: string[], o: { reason: string; by: string; config?: string }) => run(o.config, (s) => discard(s, ids, o)));

  sub('stats', 'counts by tenant and error code, by status, and over time')
    .option('--since <when>', 'rows that failed since: ISO time or a duration ago (24h, 7d); default all', (v) => parseWhen(v, Date.now()))
    .addOption(new Option('--bucket <size>', 'time bucket').choices(['hour', 'day']).default('hour'))
    .option('--json', 'JSON instead of tables')
    .action((o: { since?: Date; bucket: StatsBucket; json?: boolean; config?: string }) => run(o.config, (s) => stats(s, o)));

  return dlq;
}
