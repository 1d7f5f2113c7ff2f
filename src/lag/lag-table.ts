import { MIN_SAMPLES, exitCodeFor } from './lag-status.js';
import { reportStatus, type LagReport } from './lag-report.js';

/** Where a report shown by `sluice lag` came from. */
export type ReportSource = { kind: 'monitor'; instance: string } | { kind: 'command'; spanMs: number; why: string };

const COLUMNS = ['GROUP', 'TOPIC', 'PARTITION', 'COMMITTED', 'HIGH', 'LAG', 'SECONDS', 'STATUS'] as const;
const RIGHT_ALIGNED = new Set<string>(['PARTITION', 'COMMITTED', 'HIGH', 'LAG', 'SECONDS']);

/** Seconds as shown: one decimal, `~` before an estimate (the record could not be read). */
function seconds(value: number, estimated: boolean): string {
  return `${estimated ? '~' : ''}${value.toFixed(1)}`;
}

function sourceLine(report: LagReport, source: ReportSource): string {
  const at = new Date(report.at).toISOString();
  const window = `window ${report.windowMs / 1000} s`;
  if (source.kind === 'monitor') return `lag at ${at}, from the active lag monitor ${source.instance} (${window}, ${report.samples} samples)`;
  return (
    `lag at ${at}, measured by this command over ${(source.spanMs / 1000).toFixed(1)} s (${source.why}); ` +
    `WARN and STALL need ${MIN_SAMPLES} samples over half the ${window}, STOP a whole window: keep --watch running, or run the lag-monitor role`
  );
}

/**
 * `sluice lag`'s table: a row per group, topic and partition, then the group's total (members,
 * lag, the largest time lag, status). A committed offset never made shows as `-` (lag then counts
 * from the low watermark).
 */
export function renderLagTable(report: LagReport, source: ReportSource): string {
  const rows: string[][] = [];
  const totals: string[] = [];
  for (const g of report.groups) {
    for (const p of g.partitions) {
      rows.push([g.group, p.topic, String(p.partition), p.committed ?? '-', p.high, p.lagMessages, seconds(p.lagSeconds, p.timeSource === 'interpolated'), p.status]);
    }
    totals.push(`  ${g.group}: ${g.members} member${g.members === 1 ? '' : 's'}, lag ${g.lagMessages} messages, oldest ${g.maxLagSeconds.toFixed(1)} s, status ${g.status}`);
  }
  const widths = COLUMNS.map((c, i) => Math.max(c.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => (RIGHT_ALIGNED.has(COLUMNS[i]!) ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  const notes = ['- never committed: lag counts from the low watermark', '~ estimated from the window: the record at the committed offset could not be read'];
  return [sourceLine(report, source), '', line(COLUMNS), ...rows.map(line), '', 'groups:', ...totals, '', `status ${reportStatus(report)}; ${notes.join('; ')}`, ''].join('\n');
}

/** `sluice lag --json`: the report, where it came from, and the worst status and exit code it gives. */
export function lagJson(report: LagReport, source: ReportSource): string {
  const status = reportStatus(report);
  return JSON.stringify({ source, status, exitCode: exitCodeFor(status), ...report });
}
