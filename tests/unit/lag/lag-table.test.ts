import { describe, expect, it } from 'vitest';
import type { LagReport, PartitionLag } from '../../../src/lag/lag-report.js';
import { lagJson, renderLagTable } from '../../../src/lag/lag-table.js';

const row = (partition: number, extra: Partial<PartitionLag> = {}): PartitionLag => ({
  topic: 'ns.sluice.runs.interactive',
  partition,
  committed: '10',
  low: '0',
  high: '15',
  lagMessages: '5',
  lagSeconds: 3.25,
  timeSource: 'record',
  status: 'OK',
  ...extra,
});

const report: LagReport = {
  at: Date.UTC(2026, 0, 2, 3, 4, 5),
  windowMs: 300_000,
  samples: 20,
  groups: [
    {
      group: 'ns.sluice.processor',
      members: 2,
      status: 'STALL',
      lagMessages: '12345',
      maxLagSeconds: 62.04,
      partitions: [row(0), row(11, { committed: null, high: '12340', lagMessages: '12340', lagSeconds: 62.04, timeSource: 'interpolated', status: 'STALL' })],
    },
    { group: 'ns.sluice.status-sink', members: 1, status: 'OK', lagMessages: '0', maxLagSeconds: 0, partitions: [] },
  ],
};

describe('renderLagTable', () => {
  const text = renderLagTable(report, { kind: 'monitor', instance: 'host-1' });
  const lines = text.split('\n');

  it('says where the figures come from and when', () => {
    expect(lines[0]).toBe('lag at 2026-01-02T03:04:05.000Z, from the active lag monitor host-1 (window 300 s, 20 samples)');
  });

  it('prints a row per partition under aligned columns, numbers right-aligned', () => {
    const header = lines[2]!;
    expect(header.split(/\s+/)).toEqual(['GROUP', 'TOPIC', 'PARTITION', 'COMMITTED', 'HIGH', 'LAG', 'SECONDS', 'STATUS']);
    const rows = lines.slice(3, 5);
    expect(rows[0]!.split(/\s+/)).toEqual(['ns.sluice.processor', 'ns.sluice.runs.interactive', '0', '10', '15', '5', '3.3', 'OK']);
    expect(rows[1]!.split(/\s+/)).toEqual(['ns.sluice.processor', 'ns.sluice.runs.interactive', '11', '-', '12340', '12340', '~62.0', 'STALL']);
    // Every row's STATUS starts in the header's column.
    const at = header.indexOf('STATUS');
    for (const r of rows) expect(r.slice(at)).toMatch(/^(OK|STALL)$/);
    // LAG is right-aligned: both values end where the header's LAG ends.
    const lagEnd = header.indexOf(' LAG ') + ' LAG'.length;
    expect(rows[0]!.slice(lagEnd - 5, lagEnd)).toBe('    5');
    expect(rows[1]!.slice(lagEnd - 5, lagEnd)).toBe('12340');
  });

  it('totals each group: members, lag, the oldest record, status', () => {
    expect(text).toContain('  ns.sluice.processor: 2 members, lag 12345 messages, oldest 62.0 s, status STALL\n');
    expect(text).toContain('  ns.sluice.status-sink: 1 member, lag 0 messages, oldest 0.0 s, status OK\n');
  });

  it('ends with the worst status and what the marks mean', () => {
    expect(text).toMatch(/\nstatus STALL; - never committed: .*; ~ estimated from the window: .*\n$/);
  });

  it('says when the command measured for itself, and what its short window cannot tell', () => {
    const own = renderLagTable(report, { kind: 'command', spanMs: 2_000, why: 'no active lag monitor' }).split('\n')[0]!;
    expect(own).toContain('measured by this command over 2.0 s (no active lag monitor)');
    expect(own).toContain('STOP a whole window');
  });
});

describe('lagJson', () => {
  it('is the report with its source, worst status and exit code', () => {
    const parsed = JSON.parse(lagJson(report, { kind: 'monitor', instance: 'host-1' }));
    expect(parsed).toMatchObject({ source: { kind: 'monitor', instance: 'host-1' }, status: 'STALL', exitCode: 2, at: report.at, windowMs: 300_000 });
    expect(parsed.groups[0].partitions[1]).toEqual(report.groups[0]!.partitions[1]);
  });

  it('exit code 1 for a WARN, 0 when all is OK', () => {
    const warn = { ...report, groups: [{ ...report.groups[0]!, status: 'WARN' as const }] };
    expect(JSON.parse(lagJson(warn, { kind: 'monitor', instance: 'x' })).exitCode).toBe(1);
    expect(JSON.parse(lagJson({ ...report, groups: [report.groups[1]!] }, { kind: 'monitor', instance: 'x' })).exitCode).toBe(0);
  });
});
