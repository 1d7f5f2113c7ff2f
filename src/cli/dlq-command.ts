import { hostname, userInfo } from 'node:os';
import cliProgress from 'cli-progress';
import { Command, InvalidArgumentError, Option } from 'commander';
import type { Producer } from 'kafkajs';
import { pino } from 'pino';
import type { SluiceConfig } from '../config/schema.js';
import {
  DEAD_LETTER_STATUSES,
  DEFAULT_LIST_LIMIT,
  DeadLetterStore,
  MAX_LIST_LIMIT,
  type DeadLetterFilter,
  type DeadLetterRow,
  type DeadLetterStats,
  type DeadLetterStatus,
  type DeadLetterSummary,
  type ReplayOutcome,
  type ReplaySkip,
  type StatsBucket,
} from '../dlq/dead-letter-store.js';
import { EventDecodeError, type EventCodec } from '../events/codec.js';
import { SUBJECTS, type RunRequested } from '../events/schemas.js';
import { createIdempotentProducer } from '../kafka/client.js';
import { TimeoutError, withTimeout } from '../util/with-timeout.js';
import { topicNames, type TopicNames } from '../kafka/topics.js';
import { SharedClients } from '../roles/shared-clients.js';
import { createLogger } from '../obs/logger.js';

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

/** A command line that cannot be carried out as given; reported without a stack, exit code `usage`. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** Marks the event produced by a replay with the archive row it came from. */
export const REPLAY_HEADER = 'sluice-replay-of';

const KAFKA_CONNECT_TIMEOUT_MS = 15_000;
const CLOSE_TIMEOUT_MS = 5_000;
const MAX_RATE = 1_000;
const ERROR_WIDTH = 60;
const PAYLOAD_PREVIEW_BYTES = 64;

const DURATION_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 7 * 86_400_000 } as const;
const ISO_TIME = /^(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}:\d{2}(?::\d{2}(?:\.\d{1,3})?)?)(Z|[+-]\d{2}:\d{2})?)?$/;

/**
 * `--since`/`--until`: an ISO 8601 date or time (UTC unless it carries an offset) or a duration
 * back from `now` such as `30m`, `2h`, `7d`.
 */
export function parseWhen(raw: string, now: number): Date {
  const text = raw.trim();
  const duration = /^(\d+)([smhdw])$/.exec(text);
  if (duration) {
    const at = new Date(now - Number(duration[1]) * DURATION_MS[duration[2] as keyof typeof DURATION_MS]);
    if (Number.isFinite(at.getTime())) return at;
  }
  const iso = ISO_TIME.exec(text);
  if (iso) {
    const date = iso[1]!;
    const [, , time, offset] = iso;
    const day = new Date(`${date}T00:00Z`);
    const at = new Date(`${date}T${time ?? '00:00'}${offset ?? 'Z'}`);
    // Date rolls 2026-02-30 over to 2 March; the calendar day must survive the round trip.
    if (Number.isFinite(day.getTime()) && day.toISOString().startsWith(date) && Number.isFinite(at.getTime())) return at;
  }
  throw new InvalidArgumentError('expected an ISO 8601 time such as 2026-03-01 or 2026-03-01T12:00Z, or a duration ago such as 30m, 2h, 7d');
}

const MAX_ID = 2n ** 63n - 1n;

/** Archive ids are bigserial: positive decimal integers, kept as text. */
export function parseId(raw: string): string {
  if (!/^[1-9]\d{0,18}$/.test(raw) || BigInt(raw) > MAX_ID) throw new InvalidArgumentError(`"${raw}" is not an id: ids are positive integers, as \`sluice dlq list\` shows them`);
  return raw;
}

function collectIds(raw: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), parseId(raw)];
}

export function parseLimit(raw: string): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < 1 || n > MAX_LIST_LIMIT) throw new InvalidArgumentError(`expected a whole number from 1 to ${MAX_LIST_LIMIT}`);
  return n;
}

/** `--rate`: rows per second, as `20` or `20/s`. */
export function parseRate(raw: string): number {
  const m = /^(\d+(?:\.\d+)?)(?:\/s)?$/.exec(raw.trim());
  const n = m ? Number(m[1]) : NaN;
  if (!(n > 0 && n <= MAX_RATE)) throw new InvalidArgumentError(`expected rows per second above 0 and at most ${MAX_RATE}, such as 10 or 10/s`);
  return n;
}

function nonEmpty(raw: string): string {
  if (raw.trim() === '') throw new InvalidArgumentError('must not be empty');
  return raw;
}

export interface FilterOptions {
  tenant?: string;
  workflow?: string;
  reason?: string;
  status?: DeadLetterStatus | 'all';
  since?: Date;
  until?: Date;
  limit?: number;
}

const FILTER_OPTIONS = ['tenant', 'workflow', 'reason', 'status', 'since', 'until', 'limit'] as const satisfies readonly (keyof FilterOptions)[];

/** The store filter for the command line's filter options. */
export function filterFrom(o: FilterOptions): DeadLetterFilter {
  if (o.since && o.until && o.since.getTime() >= o.until.getTime()) throw new UsageError(`--since (${o.since.toISOString()}) must be before --until (${o.until.toISOString()})`);
  return { tenant: o.tenant, workflow: o.workflow, reason: o.reason, status: o.status === 'all' ? undefined : o.status, since: o.since, until: o.until, limit: o.limit };
}

function addFilterOptions(cmd: Command, opts: { status: boolean }): Command {
  cmd
    .option('--tenant <tenant>', 'only this tenant')
    .option('--workflow <workflow>', 'only this workflow')
    .option('--reason <code>', 'only this error code (sluice-dlt-reason), e.g. decode_error, non_retryable')
    .option('--since <when>', 'failed at or after: ISO time (UTC unless an offset is given) or a duration ago (30m, 2h, 7d)', (v) => parseWhen(v, Date.now()))
    .option('--until <when>', 'failed before: ISO time or a duration ago', (v) => parseWhen(v, Date.now()))
    .option('--limit <n>', `at most this many rows, newest first (default ${DEFAULT_LIST_LIMIT}, at most ${MAX_LIST_LIMIT})`, parseLimit);
  if (opts.status) cmd.addOption(new Option('--status <status>', 'rows in this status').choices([...DEAD_LETTER_STATUSES, 'all']).default('pending'));
  return cmd;
}

function defaultWho(): string {
  let user = process.env.USER;
  try {
    user ??= userInfo().username;
  } catch {
    // No passwd entry (some containers): the host still says where the change came from.
  }
  return `${user ?? 'unknown'}@${hostname()}`;
}

/** Columns padded to their widest cell, two spaces apart; the last column is not padded. */
export function formatTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    header
      .map((_, i) => (i === header.length - 1 ? (cells[i] ?? '') : (cells[i] ?? '').padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return `${[header, ...rows].map(line).join('\n')}\n`;
}

/** One line, at most `width` characters. */
export function clip(text: string, width: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length <= width ? flat : `${flat.slice(0, width - 1)}…`;
}

const when = (d: Date | null): string => (d === null ? '-' : d.toISOString().replace('T', ' ').replace(/\.\d{3}Z$/, 'Z'));

export function listTable(rows: readonly DeadLetterSummary[]): string {
  return formatTable(
    ['ID', 'FAILED AT', 'TENANT', 'WORKFLOW', 'REASON', 'ERROR', 'ATTEMPTS', 'STATUS', 'RUN ID'],
    rows.map((r) => [r.id, when(r.failedAt), r.tenantId ?? '-', r.workflow ?? '-', r.reason, clip(`${r.errorClass}: ${r.errorMessage}`, ERROR_WIDTH), String(r.attempts), r.status, r.runId ?? '-']),
  );
}

function showBytes(buf: Buffer): string {
  const text = buf.toString('utf8');
  return /^[\x20-\x7e]*$/.test(text) ? text : `hex ${buf.toString('hex')}`;
}

/** The stack when it has one, which already starts with the class and message. */
function errorText(row: Pick<DeadLetterRow, 'errorClass' | 'errorMessage' | 'errorStack'>): string {
  const headline = `${row.errorClass}: ${row.errorMessage}`;
  if (!row.errorStack) return headline;
  return row.errorStack.startsWith(`${row.errorClass}: `) ? row.errorStack : `${headline}\n${row.errorStack}`;
}

/** Every field of a row for a human: fields, error and stack, headers, the decoded payload. */
export function formatRow(row: DeadLetterRow): string {
  const fields: [string, string][] = [
    ['id', row.id],
    ['status', row.status],
    ['reason', row.reason],
    ['tenant', row.tenantId ?? '-'],
    ['workflow', row.workflow ?? '-'],
    ['run id', row.runId ?? '-'],
    ['original record', `${row.originalTopic} partition ${row.originalPartition} offset ${row.originalOffset}`],
    ['original key', row.originalKey === null ? '-' : showBytes(row.originalKey)],
    ['consumer group', row.consumerGroup],
    ['attempts', String(row.attempts)],
    ['first failed at', when(row.firstFailedAt)],
    ['failed at', when(row.failedAt)],
    ['archived at', when(row.archivedAt)],
    ['replays', String(row.replayCount)],
    ['replayed at', when(row.replayedAt)],
    ['replayed by', row.replayedBy ?? '-'],
    ['discarded at', when(row.discardedAt)],
    ['discarded by', row.discardedBy ?? '-'],
    ['discard reason', row.discardReason ?? '-'],
    ['payload', `${row.payload.length} bytes`],
  ];
  const width = Math.max(...fields.map(([k]) => k.length));
  const indent = (text: string) => text.replace(/^/gm, '  ');
  const payload =
    row.payloadJson === null
      ? `not decodable; first ${Math.min(PAYLOAD_PREVIEW_BYTES, row.payload.length)} bytes in hex:\n${indent(row.payload.subarray(0, PAYLOAD_PREVIEW_BYTES).toString('hex'))}`
      : indent(JSON.stringify(row.payloadJson, null, 2));
  return [
    ...fields.map(([k, v]) => `${`${k}:`.padEnd(width + 2)}${v}`),
    '',
    'error:',
    indent(errorText(row)),
    '',
    'headers:',
    ...Object.entries(row.headers).map(([k, v]) => `  ${k}: ${v}`),
    '',
    'payload:',
    payload,
    '',
  ].join('\n');
}

/** A row as JSON: the byte fields in base64. */
function rowJson(row: DeadLetterRow): Record<string, unknown> {
  return { ...row, originalKey: row.originalKey?.toString('base64') ?? null, payload: row.payload.toString('base64') };
}

export function formatStats(s: DeadLetterStats): string {
  const scope = s.since ? `failed since ${when(s.since)}` : 'of all time';
  const out = [`dead letters ${scope}: ${s.total} (pending ${s.byStatus.pending}, replayed ${s.byStatus.replayed}, discarded ${s.byStatus.discarded})`];
  if (s.byTenantReason.length > 0) {
    out.push('', formatTable(['TENANT', 'REASON', 'TOTAL', 'PENDING'], s.byTenantReason.map((g) => [g.tenantId ?? '-', g.reason, String(g.total), String(g.pending)])).trimEnd());
  }
  if (s.overTime.length > 0) {
    out.push('', formatTable([`${s.bucket.toUpperCase()} (UTC)`, 'TOTAL'], s.overTime.map((b) => [when(b.bucket), String(b.total)])).trimEnd());
  }
  return `${out.join('\n')}\n`;
}

/** Where a replayed row goes and what it carries. */
export interface ReplayPlan {
  topic: string;
  key: string | Buffer | null;
  headers: Record<string, string>;
  /** A decodable run's next attempt (encoded when sent), or the untouched bytes of poison. */
  body: { run: RunRequested } | { raw: Buffer };
}

/**
 * The run's next attempt. Its old deadline has passed while it sat in the archive, so it gets a
 * window as long as the one it was admitted with, starting now, and may start at once.
 */
export function nextAttempt(run: RunRequested, now: number): RunRequested {
  return { ...run, attempt: run.attempt + 1, admittedAt: now, deadline: now + (run.deadline - run.admittedAt), dueAt: null };
}

/** A row that must not be replayed as it is: it stays pending, for `discard` or another namespace's replay. */
export class ReplayRefusedError extends Error {
  override readonly name = 'ReplayRefusedError';
}

/**
 * A run goes to its class's work topic as its next attempt; poison goes back as it came, but only
 * into this namespace's topics: its original topic is whatever the dead letter's headers said,
 * and anyone who can write to the DLQ topic can say anything there.
 */
export function planReplay(row: Pick<DeadLetterRow, 'id' | 'originalTopic' | 'originalKey' | 'payload'>, run: RunRequested | undefined, topics: TopicNames, now: number): ReplayPlan {
  if (!run) {
    const own = Object.values(topics);
    if (!own.includes(row.originalTopic)) {
      throw new ReplayRefusedError(`its original topic ${JSON.stringify(row.originalTopic)} is not one of this namespace's topics (${own.join(', ')}), the only ones a replay produces into`);
    }
    return { topic: row.originalTopic, key: row.originalKey, headers: { [REPLAY_HEADER]: row.id }, body: { raw: row.payload } };
  }
  const next = nextAttempt(run, now);
  return { topic: topics[next.class], key: next.tenantId, headers: { traceparent: next.traceparent, [REPLAY_HEADER]: row.id }, body: { run: next } };
}

function describePlan(id: string, plan: ReplayPlan): string {
  if ('raw' in plan.body) return `#${id}: the original ${plan.body.raw.length} bytes -> ${plan.topic}, unchanged`;
  const { run } = plan.body;
  return `#${id}: run ${run.runId} (${run.tenantId}/${run.workflow}) -> ${plan.topic} as attempt ${run.attempt}, deadline ${when(new Date(run.deadline))}`;
}

/**
 * The archived run, or undefined for poison. A run the sink decoded when archiving it but that
 * does not decode now points at a different schema registry: replaying its bytes as poison would
 * be wrong, so that is an error.
 */
async function decodeRun(codec: EventCodec, row: DeadLetterRow): Promise<RunRequested | undefined> {
  try {
    return await codec.decode<RunRequested>(row.payload, SUBJECTS.runRequested);
  } catch (err) {
    if (!(err instanceof EventDecodeError)) throw err;
    if (row.payloadJson !== null) throw new Error(`the run was decoded when archived but does not decode now (${err.message}): is this the schema registry the processors use?`, { cause: err });
    return undefined;
  }
}

const SKIP_TEXT: Record<ReplaySkip, string> = {
  not_found: 'not found',
  replayed: 'already replayed',
  discarded: 'discarded',
  locked: 'being replayed by someone else',
};

/** What happened to one row: the store's outcome, with a refusal told apart from a failure. */
export type ReplayResult = ReplayOutcome<ReplayPlan> | { id: string; result: 'refused'; error: ReplayRefusedError };

/** The store reports a refusal thrown while planning as a failed produce; it is a decision about the row. */
export function replayResult(o: ReplayOutcome<ReplayPlan>): ReplayResult {
  return o.result === 'failed' && o.error instanceof ReplayRefusedError ? { id: o.id, result: 'refused', error: o.error } : o;
}

export function outcomeLine(o: ReplayResult, dryRun: boolean): string {
  switch (o.result) {
    case 'replayed':
      return `${dryRun ? 'would replay' : 'replayed'} ${describePlan(o.id, o.value)}`;
    case 'skipped':
      return `${dryRun ? 'would skip' : 'skipped'} #${o.id}: ${SKIP_TEXT[o.why]}`;
    case 'refused':
      return `${dryRun ? 'would refuse' : 'refused'} #${o.id}: ${o.error.message}`;
    case 'failed':
      return `failed #${o.id}: ${o.error.message}`;
  }
}

export interface ReplayTally {
  replayed: number;
  refused: number;
  failed: number;
  skipped: Record<ReplaySkip, number>;
}

export function emptyTally(): ReplayTally {
  return { replayed: 0, refused: 0, failed: 0, skipped: { not_found: 0, replayed: 0, discarded: 0, locked: 0 } };
}

export function tallyOutcome(tally: ReplayTally, o: ReplayResult): void {
  if (o.result === 'skipped') tally.skipped[o.why]++;
  else tally[o.result]++;
}

export function summaryLine(t: ReplayTally, dryRun: boolean): string {
  const whys = (Object.entries(t.skipped) as [ReplaySkip, number][]).filter(([, n]) => n > 0).map(([why, n]) => `${n} ${SKIP_TEXT[why]}`);
  const skipped = Object.values(t.skipped).reduce((a, b) => a + b, 0);
  const detail = whys.length > 0 ? ` (${whys.join(', ')})` : '';
  if (dryRun) return `dry run, nothing changed: would replay ${t.replayed}, skip ${skipped}${detail}${t.refused > 0 ? `, refuse ${t.refused}` : ''}`;
  return `replayed ${t.replayed}, skipped ${skipped}${detail}${t.refused > 0 ? `, refused ${t.refused}` : ''}, failed ${t.failed}`;
}

/** A failure may go away when run again (1); a skip or a refusal will not (3). */
export function exitFor(t: ReplayTally, exit: DlqExitCodes): number {
  if (t.failed > 0) return exit.failure;
  return t.refused > 0 || Object.values(t.skipped).some((n) => n > 0) ? exit.partial : exit.ok;
}

/** Spaces calls `1/rate` seconds apart; the first goes at once. */
export function pacer(ratePerSec: number, now: () => number = Date.now, sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))): () => Promise<void> {
  const intervalMs = 1_000 / ratePerSec;
  let next = -Infinity;
  return async () => {
    const t = now();
    const at = Math.max(next, t);
    next = at + intervalMs;
    if (at > t) await sleep(at - t);
  };
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
  private producer?: Producer;

  constructor(
    readonly config: SluiceConfig,
    readonly exitCodes: DlqExitCodes,
  ) {
    // stdout is the command's output: logs (kafkajs warnings among them) go to stderr.
    this.clients = new SharedClients(config, createLogger('warn', 'sluice', pino.destination(2)));
  }

  get codec(): EventCodec {
    return this.clients.codec;
  }

  /** Connects and applies pending migrations, like every role does. */
  async store(): Promise<DeadLetterStore> {
    try {
      return new DeadLetterStore(await this.clients.pool(), { statementTimeoutMs: this.config.postgres.statementTimeoutMs, namespace: this.config.namespace });
    } catch (err) {
      throw new Error(`Postgres: ${(err as Error).message}`, { cause: err });
    }
  }

  /** A producer and the topics that exist: a replay never creates topics, a wrong namespace must not go unnoticed. */
  async connectKafka(): Promise<{ producer: Producer; topics: Set<string> }> {
    const { kafka } = this.clients;
    const admin = kafka.admin();
    let topics: Set<string>;
    try {
      await withTimeout(admin.connect(), KAFKA_CONNECT_TIMEOUT_MS, 'Kafka: connecting');
      topics = new Set(await withTimeout(admin.listTopics(), KAFKA_CONNECT_TIMEOUT_MS, 'Kafka: listing topics'));
    } finally {
      await withTimeout(admin.disconnect(), CLOSE_TIMEOUT_MS, 'Kafka: disconnecting').catch(() => undefined);
    }
    const producer = createIdempotentProducer(kafka);
    this.producer = producer;
    await withTimeout(producer.connect(), KAFKA_CONNECT_TIMEOUT_MS, 'Kafka: connecting the producer');
    return { producer, topics };
  }

  async close(): Promise<void> {
    await Promise.allSettled([this.producer?.disconnect(), this.clients.close()]);
  }
}

async function send(producer: Producer, codec: EventCodec, plan: ReplayPlan, timeoutMs: number): Promise<void> {
  const value = 'raw' in plan.body ? plan.body.raw : await codec.encode(SUBJECTS.runRequested, plan.body.run);
  await withTimeout(producer.send({ topic: plan.topic, acks: -1, timeout: timeoutMs, messages: [{ key: plan.key, value, headers: plan.headers }] }), timeoutMs + 1_000, `Kafka: producing to ${plan.topic}`);
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

/** What a replay of the row would do, without taking its lock or touching Kafka. */
async function previewReplay(s: Session, store: DeadLetterStore, id: string, topics: TopicNames): Promise<ReplayResult> {
  const row = await store.get(id);
  if (!row) return { id, result: 'skipped', why: 'not_found' };
  if (row.status !== 'pending') return { id, result: 'skipped', why: row.status };
  try {
    return { id, result: 'replayed', value: planReplay(row, await decodeRun(s.codec, row), topics, Date.now()) };
  } catch (err) {
    return replayResult({ id, result: 'failed', error: err as Error });
  }
}

/** Replays the rows one by one at the given rate; stops early only when Kafka stops answering. */
async function replayRows(s: Session, store: DeadLetterStore, targets: readonly string[], topics: TopicNames, o: ReplayOptions, tally: ReplayTally): Promise<void> {
  const { producer, topics: existing } = await s.connectKafka();
  const timeoutMs = s.config.kafka.produceTimeoutMs;
  const pace = pacer(o.rate);
  const progress = replayProgress(targets.length);
  let untried = 0;
  for (const [i, id] of targets.entries()) {
    await pace();
    const outcome = replayResult(
      await store.replayOne(id, o.by, async (row) => {
        const plan = planReplay(row, await decodeRun(s.codec, row), topics, Date.now());
        if (!existing.has(plan.topic)) throw new Error(`topic ${plan.topic} does not exist: is the namespace (SLUICE_NAMESPACE) right?`);
        await send(producer, s.codec, plan, timeoutMs);
        return plan;
      }),
    );
    tallyOutcome(tally, outcome);
    progress.report(outcome);
    // Otherwise every row after it would wait out a timeout of its own.
    if (outcome.result === 'failed' && outcome.error instanceof TimeoutError) {
      untried = targets.length - i - 1;
      break;
    }
  }
  progress.stop();
  if (untried > 0) write(process.stderr, `sluice dlq: stopped as Kafka did not answer; ${untried} more rows left pending, untried`);
}

async function replay(s: Session, ids: string[] | undefined, o: ReplayOptions): Promise<number> {
  const byIds = ids !== undefined && ids.length > 0;
  const given = FILTER_OPTIONS.filter((k) => k !== 'status' && o[k] !== undefined);
  if (byIds && given.length > 0) throw new UsageError(`give ids or filters (--${given.join(', --')}), not both`);
  if (!byIds && !o.yes && !o.dryRun) throw new UsageError('replaying every pending row a filter matches needs --yes (see what it would take with --dry-run)');
  const filter = filterFrom(o);
  const store = await s.store();
  // Oldest first, so records go back in the order they failed.
  const targets = byIds ? [...new Set(ids)] : (await store.list({ ...filter, status: 'pending' })).map((r) => r.id).reverse();
  if (!byIds && targets.length === (filter.limit ?? DEFAULT_LIST_LIMIT)) write(process.stderr, `taking the newest ${targets.length} matching rows; run again for more (--limit)`);
  const topics = topicNames(s.config.namespace);
  const tally = emptyTally();
  if (o.dryRun) {
    for (const id of targets) {
      const outcome = await previewReplay(s, store, id, topics);
      tallyOutcome(tally, outcome);
      write(process.stdout, outcomeLine(outcome, true));
    }
  } else if (targets.length > 0) {
    await replayRows(s, store, targets, topics, o, tally);
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
    .option('--rate <n/s>', 'rows per second', parseRate, 10)
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
