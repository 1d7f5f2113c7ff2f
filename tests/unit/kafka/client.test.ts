import { KafkaJSConnectionError } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { needsNewProducerId } from '../../../src/kafka/client.js';
import { brokerAnswer, notRetried } from '../../support/kafka-errors.js';

describe('needsNewProducerId', () => {
  it('is true for the answers after which the broker takes none of the producer\'s sequence numbers, bare or wrapped', () => {
    for (const [type, code] of [
      ['OUT_OF_ORDER_SEQUENCE_NUMBER', 45],
      ['UNKNOWN_PRODUCER_ID', 59],
      ['INVALID_PRODUCER_EPOCH', 47],
    ] as const) {
      expect(needsNewProducerId(brokerAnswer(type, code)), type).toBe(true);
      expect(needsNewProducerId(notRetried(brokerAnswer(type, code))), type).toBe(true);
    }
  });

  it('is false for what retrying or waiting mends: a dead broker, no leader, a message too large, anything else', () => {
    expect(needsNewProducerId(new KafkaJSConnectionError('Connection error: connect ECONNREFUSED'))).toBe(false);
    expect(needsNewProducerId(notRetried(brokerAnswer('NOT_LEADER_FOR_PARTITION', 6)))).toBe(false);
    expect(needsNewProducerId(notRetried(brokerAnswer('MESSAGE_TOO_LARGE', 10)))).toBe(false);
    expect(needsNewProducerId(new Error('boom'))).toBe(false);
    expect(needsNewProducerId('OUT_OF_ORDER_SEQUENCE_NUMBER')).toBe(false);
    expect(needsNewProducerId(undefined)).toBe(false);
  });
});
