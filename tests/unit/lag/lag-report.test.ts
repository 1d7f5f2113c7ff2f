import { describe, expect, it } from 'vitest';
import { LagWindows, MAX_SAMPLES, recordKey, reportStatus, resumeOffset, type OffsetsReading, type PartitionOffsets } from '../../../src/lag/lag-report.js';

const W = { windowMs: 60_000, minSamples: 3 };
const G = 'ns.sluice.processor';
const T = 'ns.sluice.runs.interactive';

const part = (partition: number, committed: string, high: string, low = '0', group = G, topic = T): PartitionOffsets => ({ group, topic, partition, committed, low, high });
const reading = (at: number, partitions: PartitionOffsets[], members: Record<string, number> = { [G]: 1 }): OffsetsReading => ({ at, partitions, members });

describe('resumeOffset', () => {
  it('is the committed offset, or the low watermark when the group never committed (-1)', () => {
    expect(resumeOffset({ committed: '17', low: '5' })).toBe(17n);
    expect(resumeOffset({ committed: '-1', low: '5' })).toBe(5n);
  });

  it('keeps 64-bit offsets exact', () => {
    expect(resumeOffset({ committed: '9223372036854775806', low: '0' })).toBe(9_223_372_036_854_775_806n);
  });
});

describe('LagWindows', () => {
  it('reports lag per partition from high watermark − committed, counting from the low watermark where nothing was committed', () => {
    const w = new LagWindows(W);
    const r = reading(1_000, [part(0, '10', '15'), part(1, '-1', '12', '4'), part(2, '20', '20')]);
    w.record(r);
    const report = w.report(r, new Map());
    const g = report.groups[0]!;
    expect(g.partitions.map((p) => [p.partition, p.committed, p.lagMessages])).toEqual([
      [0, '10', '5'],
      [1, null, '8'],
      [2, '20', '0'],
    ]);
    expect(g.lagMessages).toBe('13');
    expect(g.members).toBe(1);
  });

  it('sums group lag in BigInt: no precision lost past 2^53', () => {
    const w = new LagWindows(W);
    const big = 2n ** 53n;
    const r = reading(1_000, [part(0, '0', String(big + 1n)), part(1, '0', String(big + 1n))]);
    w.record(r);
    expect(w.report(r, new Map()).groups[0]!.lagMessages).toBe(String(2n * big + 2n));
  });

  it('asks for the record at the resume offset of every partition with lag, below its high watermark, unless retention deleted it', () => {
    const w = new LagWindows(W);
    const r = reading(1_000, [part(0, '10', '15'), part(1, '-1', '12', '4'), part(2, '20', '20'), part(3, '3', '12', '4')]);
    expect(w.recordRequests(r)).toEqual([
      { topic: T, partition: 0, offset: 10n, below: 15n },
      { topic: T, partition: 1, offset: 4n, below: 12n },
    ]);
  });

  it('takes time lag from the record timestamps given, and interpolates where one is missing', () => {
    const w = new LagWindows(W);
    const first = reading(0, [part(0, '10', '10'), part(1, '0', '0')]);
    const second = reading(10_000, [part(0, '10', '20'), part(1, '0', '10')]);
    w.record(first);
    w.record(second);
    const report = w.report(second, new Map([[recordKey({ topic: T, partition: 0, offset: 10n }), 4_000]]));
    const [p0, p1] = report.groups[0]!.partitions;
    expect(p0).toMatchObject({ lagSeconds: 6, timeSource: 'record' });
    // Offset 0 was the first of the 10 records written between 0 s and 10 s.
    expect(p1).toMatchObject({ lagSeconds: 9, timeSource: 'interpolated' });
    expect(report.groups[0]!.maxLagSeconds).toBe(9);
  });

  it('judges status over the readings: a partition stuck with lag goes STALL, the group takes its worst', () => {
    const w = new LagWindows(W);
    let last: OffsetsReading | undefined;
    for (let i = 0; i < 4; i++) {
      last = reading(i * 10_000, [part(0, '3', '9'), part(1, String(i * 5), String(i * 5))]);
      w.record(last);
    }
    const report = w.report(last!, new Map());
    expect(report.groups[0]!.partitions.map((p) => p.status)).toEqual(['STALL', 'OK']);
    expect(report.groups[0]!.status).toBe('STALL');
    expect(reportStatus(report)).toBe('STALL');
    expect(report.samples).toBe(4);
  });

  it('keeps groups apart even when they read the same topic', () => {
    const w = new LagWindows(W);
    const r = reading(0, [part(0, '1', '5', '0', 'a'), part(0, '5', '5', '0', 'b')], { a: 0, b: 2 });
    w.record(r);
    const report = w.report(r, new Map());
    expect(report.groups.map((g) => [g.group, g.members, g.lagMessages])).toEqual([
      ['a', 0, '4'],
      ['b', 2, '0'],
    ]);
  });

  it('reports a group Kafka knows nothing of with its members and no partitions', () => {
    const w = new LagWindows(W);
    const r = reading(0, [], { [G]: 0 });
    w.record(r);
    expect(w.report(r, new Map()).groups).toEqual([{ group: G, members: 0, status: 'OK', lagMessages: '0', maxLagSeconds: 0, partitions: [] }]);
  });

  it('forgets a partition no longer read (topic deleted)', () => {
    const w = new LagWindows(W);
    w.record(reading(0, [part(0, '1', '5'), part(1, '1', '5')]));
    expect(w.size).toBe(2);
    w.record(reading(1_000, [part(0, '1', '5')]));
    expect(w.size).toBe(1);
  });

  it('sorts partitions by topic, then partition number', () => {
    const w = new LagWindows(W);
    const r = reading(0, [part(10, '0', '0', '0', G, 'b'), part(2, '0', '0', '0', G, 'b'), part(1, '0', '0', '0', G, 'a')]);
    w.record(r);
    expect(w.report(r, new Map()).groups[0]!.partitions.map((p) => `${p.topic}/${p.partition}`)).toEqual(['a/1', 'b/2', 'b/10']);
  });

  it('keeps at most MAX_SAMPLES per partition, whatever the window', () => {
    const w = new LagWindows({ windowMs: 1e12, minSamples: 3 });
    let last: OffsetsReading | undefined;
    for (let i = 0; i < MAX_SAMPLES + 5; i++) {
      last = reading(i, [part(0, '0', '0')]);
      w.record(last);
    }
    expect(w.report(last!, new Map()).samples).toBe(MAX_SAMPLES);
  });
});
