import type { DeadLetterRow, DeadLetterStats, DeadLetterSummary } from '../dlq/dead-letter-store.js';
import { when } from '../dlq/replay-text.js';

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
      ? `not a run Sluice wrote (poison, or a record the ingress refused); first ${Math.min(PAYLOAD_PREVIEW_BYTES, row.payload.length)} bytes in hex:\n${indent(row.payload.subarray(0, PAYLOAD_PREVIEW_BYTES).toString('hex'))}`
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
