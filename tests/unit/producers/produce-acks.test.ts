import { describe, expect, it } from 'vitest';
import { PartitionsNotAcknowledgedError, unacknowledged } from '../../../src/producers/produce-acks.js';

const ok = (topicName: string, partition: number) => ({ topicName, partition, errorCode: 0 });

describe('unacknowledged', () => {
  it('is empty when every record’s partition answered', () => {
    expect(unacknowledged([{ topic: 'a', partition: 0 }, { topic: 'a', partition: 0 }, { topic: 'b', partition: 2 }], [ok('a', 0), ok('b', 2)])).toEqual([]);
  });

  it('names every record of a partition the answer left out, by position', () => {
    const sent = [{ topic: 'a', partition: 0 }, { topic: 'a', partition: 1 }, { topic: 'a', partition: 0 }, { topic: 'a', partition: 1 }];
    expect(unacknowledged(sent, [ok('a', 0)])).toEqual([1, 3]);
  });

  it('tells topics apart: the same partition number of another topic acknowledges nothing', () => {
    expect(unacknowledged([{ topic: 'a', partition: 1 }, { topic: 'b', partition: 1 }], [ok('b', 1)])).toEqual([0]);
  });

  it('counts a partition that answered with an error, and a record never partitioned, as not acknowledged', () => {
    const sent = [{ topic: 'a', partition: 0 }, { topic: 'a', partition: undefined }, { topic: 'a', partition: 1 }];
    expect(unacknowledged(sent, [{ topicName: 'a', partition: 0, errorCode: 6 }, ok('a', 1)])).toEqual([0, 1]);
  });

  it('finds every record unacknowledged in an empty answer, and nothing in an empty send', () => {
    expect(unacknowledged([{ topic: 'a', partition: 0 }], [])).toEqual([0]);
    expect(unacknowledged([], [ok('a', 0)])).toEqual([]);
  });
});

describe('PartitionsNotAcknowledgedError', () => {
  it('names the partitions', () => {
    const err = new PartitionsNotAcknowledgedError(['a[1]', 'b[0]']);
    expect(err.message).toBe('Kafka answered the send without acknowledging a[1], b[0]');
    expect(err.partitions).toEqual(['a[1]', 'b[0]']);
  });
});
