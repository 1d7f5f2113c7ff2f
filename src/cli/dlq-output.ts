import type { DeadLetterRow, DeadLetterStats, DeadLetterSummary, ReplaySkip } from '../dlq/dead-letter-store.js';
import type { ReplayResult, ReplayTally } from '../dlq/replay-outcome.js';
import type { ReplayPlan } from '../dlq/replay-plan.js';

/** What `sluice dlq` prints: tables, a row in full, stats, and a line per replayed row. */

const ERROR_WIDTH = 60;
const PAYLOAD_PREVIEW_BYTES = 64;

/**
 * Columns padded to their widest cell, two spaces apart; the last column is not padded unless it
 * is one of the `rightAligned` ones (numbers), which are padded on the left.
 */
export function formatTable(header: readonly string[], rows: readonly (readonly string[])[], rightAligned: ReadonlySet<number> = new Set()): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const cell = (cells: readonly string[], i: number) => {
    const text = cells[i] ?? '';
    if (rightAligned.has(i)) return text.padStart(widths[i]!);
    return i === header.length - 1 ? text : text.padEnd(widths[i]!);
  };
  const line = (cells: readonly string[]) =>
    header
      .map((_, i) => cell(cells, i))
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
export function rowJson(row: DeadLetterRow): Record<string, unknown> {
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

function describePlan(id: string, plan: ReplayPlan): string {
  if ('raw' in plan.body) return `#${id}: the original ${plan.body.raw.length} bytes -> ${plan.topic}, unchanged`;
  const { run } = plan.body;
  return `#${id}: run ${run.runId} (${run.tenantId}/${run.workflow}) -> ${plan.topic} as attempt ${run.attempt}, deadline ${when(new Date(run.deadline))}`;
}

const SKIP_TEXT: Record<ReplaySkip, string> = {
  not_found: 'not found',
  replayed: 'already replayed',
  discarded: 'discarded',
  locked: 'being replayed by someone else',
};

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

export function summaryLine(t: ReplayTally, dryRun: boolean): string {
  const whys = (Object.entries(t.skipped) as [ReplaySkip, number][]).filter(([, n]) => n > 0).map(([why, n]) => `${n} ${SKIP_TEXT[why]}`);
  const skipped = Object.values(t.skipped).reduce((a, b) => a + b, 0);
  const detail = whys.length > 0 ? ` (${whys.join(', ')})` : '';
  if (dryRun) return `dry run, nothing changed: would replay ${t.replayed}, skip ${skipped}${detail}${t.refused > 0 ? `, refuse ${t.refused}` : ''}`;
  return `replayed ${t.replayed}, skipped ${skipped}${detail}${t.refused > 0 ? `, refused ${t.refused}` : ''}, failed ${t.failed}`;
}
