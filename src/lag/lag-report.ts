import { lagOf, partitionStatus, retainedSamples, worstStatus, type LagStatus, type OffsetSample, type StatusWindow } from './lag-status.js';
import { timeLag, type TimeLagSource } from './time-lag.js';

/** A partition's offsets as Kafka reports them: decimal strings, `-1` for "no commit". */
export interface PartitionOffsets {
  group: string;
  topic: string;
  partition: number;
  committed: string;
  low: string;
  high: string;
}

/** One read of every monitored group's offsets and members. */
export interface OffsetsReading {
  /** Epoch ms, when the reading completed. */
  at: number;
  partitions: PartitionOffsets[];
  /** Members per group; 0 for a group Kafka does not know. */
  members: Record<string, number>;
}

/** A partition's lag as exported and shown; offsets stay decimal strings (JSON has no 64-bit integers). */
export interface PartitionLag {
  topic: string;
  partition: number;
  /** The group's committed offset, or null when it never committed (it resumes from `low`). */
  committed: string | null;
  low: string;
  high: string;
  lagMessages: string;
  lagSeconds: number;
  timeSource: TimeLagSource;
  status: LagStatus;
}

export interface GroupLag {
  group: string;
  members: number;
  /** The worst partition's. */
  status: LagStatus;
  lagMessages: string;
  /** The largest partition time lag. */
  maxLagSeconds: number;
  partitions: PartitionLag[];
}

export interface LagReport {
  /** Epoch ms of the reading. */
  at: number;
  windowMs: number;
  /** Samples behind the statuses: the window's, fewer while it fills. */
  samples: number;
  groups: GroupLag[];
}

/** Where a record's timestamp is asked for: the offset the group resumes from, and the high watermark it must lie below. */
export interface RecordRequest {
  topic: string;
  partition: number;
  offset: bigint;
  below: bigint;
}

export type RecordTimestamps = ReadonlyMap<string, number>;

export const partitionKey = (topic: string, partition: number) => `${topic}/${partition}`;
export const recordKey = (r: Pick<RecordRequest, 'topic' | 'partition' | 'offset'>) => `${partitionKey(r.topic, r.partition)}@${r.offset}`;

/** A committed offset as a sample's: Kafka's `-1` (no commit) resumes from the low watermark. */
export function resumeOffset(p: Pick<PartitionOffsets, 'committed' | 'low'>): bigint {
  const committed = BigInt(p.committed);
  return committed < 0n ? BigInt(p.low) : committed;
}

/** Hard bound on samples per partition, whatever the window and interval. */
export const MAX_SAMPLES = 1_000;

/**
 * The sliding windows of samples per group and partition, fed one reading at a time. A
 * partition that disappears from the readings (topic deleted) is forgotten.
 */
export class LagWindows {
  private readonly windows = new Map<string, OffsetSample[]>();

  constructor(private readonly window: StatusWindow) {}

  get size(): number {
    return this.windows.size;
  }

  record(reading: OffsetsReading): void {
    const seen = new Set<string>();
    for (const p of reading.partitions) {
      const key = `${p.group}|${partitionKey(p.topic, p.partition)}`;
      seen.add(key);
      const sample: OffsetSample = { at: reading.at, committed: resumeOffset(p), high: BigInt(p.high) };
      const kept = retainedSamples([...(this.windows.get(key) ?? []), sample], reading.at, this.window.windowMs);
      this.windows.set(key, kept.slice(-MAX_SAMPLES));
    }
    for (const key of this.windows.keys()) if (!seen.has(key)) this.windows.delete(key);
  }

  /**
   * The records whose timestamps the time lag needs: one per partition with lag, unless retention
   * already deleted it (a committed offset below the low watermark): that one is interpolated.
   */
  recordRequests(reading: OffsetsReading): RecordRequest[] {
    const requests = new Map<string, RecordRequest>();
    for (const p of reading.partitions) {
      const offset = resumeOffset(p);
      const high = BigInt(p.high);
      if (high > offset && offset >= BigInt(p.low)) requests.set(recordKey({ ...p, offset }), { topic: p.topic, partition: p.partition, offset, below: high });
    }
    return [...requests.values()];
  }

  /** Lag, time lag and status of every partition in `reading` (which must have been recorded), grouped. */
  report(reading: OffsetsReading, timestamps: RecordTimestamps): LagReport {
    const groups = new Map<string, PartitionLag[]>();
    let samples = 0;
    for (const p of reading.partitions) {
      const window = this.windows.get(`${p.group}|${partitionKey(p.topic, p.partition)}`) ?? [];
      const latest = window[window.length - 1] ?? { at: reading.at, committed: resumeOffset(p), high: BigInt(p.high) };
      samples = Math.max(samples, window.length);
      const time = timeLag(latest, timestamps.get(recordKey({ ...p, offset: latest.committed })), window, reading.at);
      const rows = groups.get(p.group) ?? [];
      rows.push({
        topic: p.topic,
        partition: p.partition,
        committed: BigInt(p.committed) < 0n ? null : p.committed,
        low: p.low,
        high: p.high,
        lagMessages: String(lagOf(latest)),
        lagSeconds: time.seconds,
        timeSource: time.source,
        status: partitionStatus(window, reading.at, this.window),
      });
      groups.set(p.group, rows);
    }
    const names = new Set([...Object.keys(reading.members), ...groups.keys()]);
    return {
      at: reading.at,
      windowMs: this.window.windowMs,
      samples,
      groups: [...names].map((group) => groupLag(group, reading.members[group] ?? 0, groups.get(group) ?? [])),
    };
  }
}

function groupLag(group: string, members: number, partitions: PartitionLag[]): GroupLag {
  partitions.sort((a, b) => (a.topic === b.topic ? a.partition - b.partition : a.topic < b.topic ? -1 : 1));
  return {
    group,
    members,
    status: worstStatus(partitions.map((p) => p.status)),
    lagMessages: String(partitions.reduce((sum, p) => sum + BigInt(p.lagMessages), 0n)),
    maxLagSeconds: partitions.reduce((max, p) => Math.max(max, p.lagSeconds), 0),
    partitions,
  };
}

/** The worst status of a report. */
export function reportStatus(report: Pick<LagReport, 'groups'>): LagStatus {
  return worstStatus(report.groups.map((g) => g.status));
}
