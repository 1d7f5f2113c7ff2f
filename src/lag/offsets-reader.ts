import type { Admin } from 'kafkajs';
import { withTimeout } from '../util/with-timeout.js';
import type { OffsetsReading, PartitionOffsets } from './lag-report.js';

export type OffsetsAdmin = Pick<Admin, 'fetchTopicOffsets' | 'fetchOffsets' | 'describeGroups'>;

export interface MonitoredGroup {
  group: string;
  topics: string[];
}

/**
 * Reads what lag is made of, with read-only admin requests only: each topic's low and high
 * watermarks (ListOffsets), each group's committed offsets (OffsetFetch) and members
 * (DescribeGroups). Nothing here can move an offset. The whole read is bounded by `timeoutMs`.
 */
export class OffsetsReader {
  private readonly topics: string[];

  constructor(
    private readonly admin: OffsetsAdmin,
    private readonly groups: readonly MonitoredGroup[],
    private readonly timeoutMs: number,
    private readonly now: () => number = Date.now,
  ) {
    this.topics = [...new Set(groups.flatMap((g) => g.topics))];
  }

  read(): Promise<OffsetsReading> {
    return withTimeout(this.readUnbounded(), this.timeoutMs, 'reading consumer group offsets from Kafka');
  }

  private async readUnbounded(): Promise<OffsetsReading> {
    const [watermarks, committed, described] = await Promise.all([
      Promise.all(this.topics.map(async (topic) => [topic, await this.admin.fetchTopicOffsets(topic)] as const)),
      Promise.all(this.groups.map((g) => this.admin.fetchOffsets({ groupId: g.group, topics: g.topics }))),
      this.admin.describeGroups(this.groups.map((g) => g.group)),
    ]);
    const marks = new Map(watermarks.map(([topic, partitions]) => [topic, new Map(partitions.map((p) => [p.partition, p]))]));
    const partitions: PartitionOffsets[] = [];
    this.groups.forEach((g, i) => {
      for (const { topic, partitions: offsets } of committed[i]!) {
        for (const { partition, offset } of offsets) {
          const mark = marks.get(topic)?.get(partition);
          // A partition created after the watermarks were read shows up in the next reading.
          if (mark) partitions.push({ group: g.group, topic, partition, committed: offset, low: mark.low, high: mark.high });
        }
      }
    });
    const members: Record<string, number> = Object.fromEntries(this.groups.map((g) => [g.group, 0]));
    for (const d of described.groups) if (d.groupId in members) members[d.groupId] = d.members.length;
    return { at: this.now(), partitions, members };
  }
}
