import { describe, expect, it } from 'vitest';
import { OffsetsReader, type OffsetsAdmin } from '../../../src/lag/offsets-reader.js';
import { TimeoutError } from '../../../src/util/with-timeout.js';

const GROUPS = [
  { group: 'p', topics: ['work-a', 'work-b'] },
  { group: 's', topics: ['status'] },
];

function fakeAdmin(calls: string[], hang = false): OffsetsAdmin {
  const never = new Promise<never>(() => undefined);
  return {
    fetchTopicOffsets: async (topic: string) => {
      calls.push(`watermarks ${topic}`);
      if (hang) return never;
      return [0, 1].map((partition) => ({ partition, offset: String(10 + partition), high: String(10 + partition), low: String(partition) }));
    },
    fetchOffsets: async ({ groupId, topics }: { groupId: string; topics?: string[] }) => {
      calls.push(`committed ${groupId} ${topics?.join(',')}`);
      return (topics ?? []).map((topic) => ({ topic, partitions: [0, 1, 2].map((partition) => ({ partition, offset: groupId === 's' ? '-1' : String(5 + partition), metadata: null })) }));
    },
    describeGroups: async (groupIds: string[]) => {
      calls.push(`members ${groupIds.join(',')}`);
      return { groups: [{ groupId: 'p', members: [{}, {}], state: 'Stable' }, { groupId: 's', members: [], state: 'Dead' }] } as never;
    },
  } as unknown as OffsetsAdmin;
}

describe('OffsetsReader', () => {
  it('reads each topic once, each group once and every group\'s members in one request, read-only calls only', async () => {
    const calls: string[] = [];
    const reading = await new OffsetsReader(fakeAdmin(calls), GROUPS, 1_000, () => 42).read();
    expect(calls.sort()).toEqual(['committed p work-a,work-b', 'committed s status', 'members p,s', 'watermarks status', 'watermarks work-a', 'watermarks work-b']);
    expect(reading.at).toBe(42);
    expect(reading.members).toEqual({ p: 2, s: 0 });
  });

  it('joins committed offsets to the watermarks by topic and partition, keeping Kafka\'s strings (-1: no commit)', async () => {
    const reading = await new OffsetsReader(fakeAdmin([]), GROUPS, 1_000).read();
    expect(reading.partitions).toEqual([
      { group: 'p', topic: 'work-a', partition: 0, committed: '5', low: '0', high: '10' },
      { group: 'p', topic: 'work-a', partition: 1, committed: '6', low: '1', high: '11' },
      { group: 'p', topic: 'work-b', partition: 0, committed: '5', low: '0', high: '10' },
      { group: 'p', topic: 'work-b', partition: 1, committed: '6', low: '1', high: '11' },
      { group: 's', topic: 'status', partition: 0, committed: '-1', low: '0', high: '10' },
      { group: 's', topic: 'status', partition: 1, committed: '-1', low: '1', high: '11' },
    ]);
  });

  it('is bounded: a Kafka that does not answer fails the read after the timeout', async () => {
    await expect(new OffsetsReader(fakeAdmin([], true), GROUPS, 50).read()).rejects.toBeInstanceOf(TimeoutError);
  });

  it('counts 0 members for a group Kafka does not list', async () => {
    const admin = { ...fakeAdmin([]), describeGroups: async () => ({ groups: [] }) } as unknown as OffsetsAdmin;
    expect((await new OffsetsReader(admin, GROUPS, 1_000).read()).members).toEqual({ p: 0, s: 0 });
  });
});
