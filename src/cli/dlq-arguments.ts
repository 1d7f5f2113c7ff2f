import { hostname, userInfo } from 'node:os';
import { Command, InvalidArgumentError, Option } from 'commander';
import { DEAD_LETTER_STATUSES, DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, type DeadLetterFilter, type DeadLetterStatus } from '../dlq/dead-letter-store.js';

/** A command line that cannot be carried out as given; reported without a stack, exit code `usage`. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

const MAX_RATE = 1_000;

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

export function collectIds(raw: string, previous: string[] | undefined): string[] {
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

export function nonEmpty(raw: string): string {
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

export const FILTER_OPTIONS = ['tenant', 'workflow', 'reason', 'status', 'since', 'until', 'limit'] as const satisfies readonly (keyof FilterOptions)[];

/** The store filter for the command line's filter options. */
export function filterFrom(o: FilterOptions): DeadLetterFilter {
  if (o.since && o.until && o.since.getTime() >= o.until.getTime()) throw new UsageError(`--since (${o.since.toISOString()}) must be before --until (${o.until.toISOString()})`);
  return { tenant: o.tenant, workflow: o.workflow, reason: o.reason, status: o.status === 'all' ? undefined : o.status, since: o.since, until: o.until, limit: o.limit };
}

export function addFilterOptions(cmd: Command, opts: { status: boolean }): Command {
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

/** `--by`'s default: who ran the command, and where. */
export function defaultWho(): string {
  let user = process.env.USER;
  try {
    user ??= userInfo().username;
  } catch {
    // No passwd entry (some containers): the host still says where the change came from.
  }
  return `${user ?? 'unknown'}@${hostname()}`;
}
