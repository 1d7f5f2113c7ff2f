import { describe, expect, it } from 'vitest';
import { ingressRecordLimit, partitionsAwaitingLeader, topicSpecs, type PartitionLeadership } from '../../../src/kafka/topics.js';
import { loadConfig } from '../../../src/config/load.js';

const led = (partitionId: number, leader = 1, partitionErrorCode = 0): PartitionLeadership => ({ partitionId, leader, partitionErrorCode });

describe('partitionsAwaitingLeader', () => {
  const atLeast = new Map([['t.work', 3]]);

  it('is empty once every partition has a leader and no error', () => {
    expect(partitionsAwaitingLeader([{ name: 't.work', partitions: [led(0), led(1, 2), led(2, 3)] }], atLeast)).toEqual([]);
  });

  it('names partitions without a leader, with an error, or not yet known', () => {
    const topics = [{ name: 't.work', partitions: [led(0, -1), led(1, 2, 5)] }];
    expect(partitionsAwaitingLeader(topics, atLeast)).toEqual(['t.work[0]', 't.work[1]', 't.work[2]']);
    expect(partitionsAwaitingLeader([], new Map([['t.gone', 1]]))).toEqual(['t.gone[0]']);
  });

  it('checks partitions beyond the minimum count too (a topic found with more)', () => {
    const topics = [{ name: 't.work', partitions: [led(0), led(1), led(2), led(3, -1)] }];
    expect(partitionsAwaitingLeader(topics, atLeast)).toEqual(['t.work[3]']);
  });
});

describe('topicSpecs', () => {
  it('creates topics with the replication factor and min.insync.replicas given', () => {
    const specs = topicSpecs(loadConfig({ env: {} }).kafka, 'ns.', { replicationFactor: 3, minInsyncReplicas: 2 });
    expect(specs).toHaveLength(6);
    for (const s of specs) {
      expect(s.replicationFactor).toBe(3);
      expect(s.configEntries).toContainEqual({ name: 'min.insync.replicas', value: '2' });
    }
  });

  it("caps only the ingress topic's records, leaving a dead letter of the largest room under the producer's bound", () => {
    const specs = topicSpecs(loadConfig({ env: {} }).kafka, 'ns.', { replicationFactor: 1, minInsyncReplicas: 1 });
    const caps = specs.flatMap((s) => (s.configEntries ?? []).filter((e) => e.name === 'max.message.bytes').map((e) => [s.topic, e.value]));
    expect(caps).toEqual([['ns.sluice.runs.requests', String(1_000_000 - 65_536)]]);
    expect(ingressRecordLimit(1_024)).toBe(512);
  });
});
