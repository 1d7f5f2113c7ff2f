import { Partitioners, type PartitionMetadata, type ProducerBatch, type ProducerConfig, type RecordMetadata } from 'kafkajs';

/**
 * What a fake kafkajs producer's sendBatch answers: each message placed by the producer's own
 * partitioner (as kafkajs does) among `partitions` partitions per topic, and one acknowledgement
 * per partition sent to, except those `leftOut` names (kafkajs's answer after a leader moved).
 */
export function partitionLeaders(config: ProducerConfig | undefined, partitions = 1) {
  const choose = config?.createPartitioner?.();
  const partitionMetadata = partitionsOf(partitions);
  return (batch: ProducerBatch, leftOut: (topic: string, partition: number) => boolean = () => false): RecordMetadata[] => {
    const answers = new Map<string, RecordMetadata>();
    for (const { topic, messages } of batch.topicMessages ?? []) {
      for (const message of messages) {
        const partition = choose ? choose({ topic, partitionMetadata, message }) : 0;
        if (!leftOut(topic, partition)) answers.set(`${topic}[${partition}]`, { topicName: topic, partition, errorCode: 0 });
      }
    }
    return [...answers.values()];
  };
}

function partitionsOf(n: number): PartitionMetadata[] {
  return Array.from({ length: n }, (_, partitionId) => ({ partitionId, leader: 0, partitionErrorCode: 0, replicas: [0], isr: [0], offlineReplicas: [] }));
}

/** One key per partition of an n-partition topic (`<prefix>-<i>`), as kafkajs's default partitioner places keys. */
export function keysOnPartitions(n: number, prefix: string): string[] {
  const choose = Partitioners.DefaultPartitioner();
  const partitionMetadata = partitionsOf(n);
  const keys: (string | undefined)[] = Array.from({ length: n }, () => undefined);
  for (let i = 0; keys.includes(undefined); i++) {
    const key = `${prefix}-${i}`;
    keys[choose({ topic: 't', partitionMetadata, message: { key, value: null } })] ??= key;
  }
  return keys as string[];
}
