/** One partition's answer to a produce request, as kafkajs's send reports it. */
export interface PartitionAnswer {
  topicName: string;
  partition: number;
  errorCode: number;
}

/** A message handed to a send, and the partition the partitioner chose for it (undefined: none was). */
export interface SentRecord {
  topic: string;
  partition: number | undefined;
}

/**
 * The positions in `sent` of the records whose partition the answer does not acknowledge.
 *
 * kafkajs (2.2.4, `sendMessages`) sends one request per partition leader and, when one fails,
 * refreshes the metadata and retries only to the brokers that have not answered yet. A broker
 * that did answer is skipped even if the leader of a partition the failed request carried has
 * moved to it, so those records are never sent again and the send resolves as if they had been
 * acknowledged. Its answer then lacks their partition: that is how they are found. A record
 * never partitioned, or whose partition answered with an error, is not acknowledged either.
 */
export function unacknowledged(sent: readonly SentRecord[], answers: readonly PartitionAnswer[]): number[] {
  const acknowledged = new Set(answers.filter((a) => a.errorCode === 0).map((a) => partitionId(a.topicName, a.partition)));
  const missing: number[] = [];
  sent.forEach((r, i) => {
    if (r.partition === undefined || !acknowledged.has(partitionId(r.topic, r.partition))) missing.push(i);
  });
  return missing;
}

/** `topic[partition]`, for the partitions in a log line or an error. */
export function partitionId(topic: string, partition: number): string {
  return `${topic}[${partition}]`;
}

/** Records Kafka's answer left out after every resend: they may or may not be in Kafka. */
export class PartitionsNotAcknowledgedError extends Error {
  constructor(readonly partitions: readonly string[]) {
    super(`Kafka answered the send without acknowledging ${partitions.join(', ')}`);
    this.name = 'PartitionsNotAcknowledgedError';
  }
}
