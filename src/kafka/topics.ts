import kafkajs, { type Admin, type ITopicConfig, type PartitionMetadata } from 'kafkajs';

// kafkajs is CommonJS, and Node's named-export detection does not find its enums.
const { ConfigResourceTypes } = kafkajs;
import type { SluiceConfig } from '../config/schema.js';
import { resolveReplication, type Replication } from './replication.js';

/** The contract's topic names (docs/contract.md); a namespace prefix lets environments share a cluster. */
export interface TopicNames {
  interactive: string;
  batch: string;
  retry: string;
  status: string;
  dlq: string;
  /** The ingress topic: producers' run requests, admitted by the ingress role. */
  requests: string;
}

export function topicNames(namespace: string): TopicNames {
  return {
    interactive: `${namespace}sluice.runs.interactive`,
    batch: `${namespace}sluice.runs.batch`,
    retry: `${namespace}sluice.runs.retry`,
    status: `${namespace}sluice.runs.status`,
    dlq: `${namespace}sluice.runs.dlq`,
    requests: `${namespace}sluice.runs.requests`,
  };
}

/**
 * The topics that hold runs only Sluice wrote: the submit path and the ingress write the work
 * topics after authenticating a tenant, processors write the retry topic. A dead letter's payload is
 * trusted as a run only when it was read from one of these; the ingress topic is written by
 * producers, and what the ingress refused there is a producer's bytes, never a run.
 */
export function carriesRuns(topic: string, names: TopicNames): boolean {
  return topic === names.interactive || topic === names.batch || topic === names.retry;
}

export type GroupRole = 'processor' | 'status-sink' | 'dlq-sink' | 'retry-forwarder' | 'ingress';

export function groupId(namespace: string, role: GroupRole): string {
  return `${namespace}sluice.${role}`;
}

/** Sluice's consumer groups and the topics each consumes (as their consumers subscribe), for the lag monitor. */
export function consumerGroups(namespace: string): { role: GroupRole; group: string; topics: string[] }[] {
  const t = topicNames(namespace);
  const groups: [GroupRole, string[]][] = [
    ['processor', [t.interactive, t.batch]],
    ['retry-forwarder', [t.retry]],
    ['status-sink', [t.status]],
    ['dlq-sink', [t.dlq]],
    ['ingress', [t.requests]],
  ];
  return groups.map(([role, topics]) => ({ role, group: groupId(namespace, role), topics }));
}

/** Each topic's partition count as the config asks. */
export function topicPartitions(cfg: SluiceConfig['kafka'], namespace: string): Map<string, number> {
  const names = topicNames(namespace);
  return new Map((Object.keys(names) as (keyof TopicNames)[]).map((k) => [names[k], cfg.partitions[k]]));
}

export function topicSpecs(cfg: SluiceConfig['kafka'], namespace: string, replication: Replication): ITopicConfig[] {
  const names = topicNames(namespace);
  const keys = Object.keys(names) as (keyof TopicNames)[];
  return keys.map((k) => ({
    topic: names[k],
    numPartitions: cfg.partitions[k],
    replicationFactor: replication.replicationFactor,
    configEntries: [
      // With acks=all, a produce succeeds only once this many copies hold the record.
      { name: 'min.insync.replicas', value: String(replication.minInsyncReplicas) },
      // The DLQ is an archive buffer: keep it long enough for a sink outage; others are work queues.
      { name: 'retention.ms', value: String(k === 'dlq' ? 30 * 86_400_000 : 7 * 86_400_000) },
      // Records carry the broker's append time, so the lag monitor's time lag is one clock's, not each producer's.
      { name: TIMESTAMP_TYPE, value: 'LogAppendTime' },
      ...(k === 'requests' ? [{ name: 'max.message.bytes', value: String(ingressRecordLimit(cfg.maxBatchBytes)) }] : []),
    ],
  }));
}

/**
 * The largest record the ingress topic takes. Anyone who can write to it can send a record the
 * ingress must dead-letter, and a dead letter carries the record whole plus its error, stack and
 * headers: were that envelope over what Sluice's producer sends (`maxBatchBytes`), the record could
 * be neither handled nor dead-lettered and would hold its partition. So the topic keeps that room.
 */
export function ingressRecordLimit(maxBatchBytes: number): number {
  return maxBatchBytes - Math.min(DEAD_LETTER_ROOM, Math.floor(maxBatchBytes / 2));
}

/** Bytes a dead letter adds around its record: error message and stack (5 KB at most), headers, Avro framing. */
const DEAD_LETTER_ROOM = 64 * 1024;

const TIMESTAMP_TYPE = 'message.timestamp.type';

/** The command that switches an existing topic to append-time stamps, changing no other setting. */
export function logAppendTimeCommand(brokers: readonly string[], topic: string): string {
  return `kafka-configs.sh --bootstrap-server ${brokers.join(',')} --alter --entity-type topics --entity-name ${topic} --add-config ${TIMESTAMP_TYPE}=LogAppendTime`;
}

/** A partition's metadata as the leader wait reads it. */
export type PartitionLeadership = Pick<PartitionMetadata, 'partitionId' | 'leader' | 'partitionErrorCode'>;

/**
 * The partitions, as `topic[partition]`, that cannot take records yet: without a leader, with an
 * error, or missing below the count a topic must at least have (the broker asked has not learnt
 * of them yet).
 */
export function partitionsAwaitingLeader(topics: { name: string; partitions: PartitionLeadership[] }[], atLeast: ReadonlyMap<string, number>): string[] {
  const waiting: string[] = [];
  for (const [name, count] of atLeast) {
    const partitions = topics.find((t) => t.name === name)?.partitions ?? [];
    const ids = new Set([...partitions.map((p) => p.partitionId), ...Array.from({ length: count }, (_, i) => i)]);
    for (const id of [...ids].sort((a, b) => a - b)) {
      const p = partitions.find((q) => q.partitionId === id);
      if (!p || p.leader < 0 || p.partitionErrorCode !== 0) waiting.push(`${name}[${id}]`);
    }
  }
  return waiting;
}

const LEADER_WAIT_MS = 30_000;
const LEADER_POLL_MS = 250;

/**
 * Waits until every partition of the topics has a leader that serves it (`atLeast`: each topic's
 * minimum partition count). Metadata naming a leader is not enough: right after creation that
 * broker may not host the partition yet ("This server does not host this topic-partition"), so
 * the leaders are also asked for their offsets.
 */
export async function waitForLeaders(admin: Admin, atLeast: ReadonlyMap<string, number>, timeoutMs = LEADER_WAIT_MS): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let waiting: string[] = [...atLeast.keys()];
  let lastError = '';
  for (;;) {
    try {
      const meta = await admin.fetchTopicMetadata({ topics: [...atLeast.keys()] });
      waiting = partitionsAwaitingLeader(meta.topics, atLeast);
      lastError = '';
      if (waiting.length === 0) {
        for (const topic of atLeast.keys()) await admin.fetchTopicOffsets(topic);
        return;
      }
    } catch (err) {
      lastError = `: ${(err as Error).message}`;
    }
    if (Date.now() >= deadline) {
      throw new Error(`Kafka topic partitions without a serving leader after ${timeoutMs} ms: ${waiting.join(', ')}${lastError}`);
    }
    await new Promise((r) => setTimeout(r, LEADER_POLL_MS));
  }
}

/**
 * Creates missing topics. Existing topics are left alone (their partition count is a deliberate
 * operator decision once data flows), but a mismatch is reported so it does not go unnoticed: a
 * partition count other than the config's, and records stamped with the producer's time instead
 * of the broker's. The stamp is not changed here: kafkajs offers only the non-incremental
 * AlterConfigs, which would reset every other setting of the topic an operator made.
 */
export async function ensureTopics(admin: Admin, cfg: SluiceConfig['kafka'], namespace: string): Promise<{ created: string[]; mismatched: string[] }> {
  const existing = new Set(await admin.listTopics());
  const partitionsOf = topicPartitions(cfg, namespace);
  const missingNames = [...partitionsOf.keys()].filter((t) => !existing.has(t));
  if (missingNames.length > 0) {
    // The live broker count matters only for topics still to be created.
    const replication = resolveReplication(cfg, (await admin.describeCluster()).brokers.length);
    const missing = topicSpecs(cfg, namespace, replication).filter((s) => !existing.has(s.topic));
    // Another instance may create the same topics at the same moment; createTopics tolerates that.
    // Its own leader wait (on by default) gives up on the first metadata error; ours, below, does not.
    await admin.createTopics({ topics: missing, waitForLeaders: false, timeout: 30_000 });
  }
  // A topic found may have other partition counts than the config's (reported below): wait for what it has.
  await waitForLeaders(admin, new Map([...partitionsOf].map(([t, n]) => [t, existing.has(t) ? 1 : n])));
  const specs = [...partitionsOf].map(([topic, numPartitions]) => ({ topic, numPartitions }));
  const present = specs.filter((s) => existing.has(s.topic));
  const mismatched: string[] = [];
  if (present.length > 0) {
    const meta = await admin.fetchTopicMetadata({ topics: present.map((s) => s.topic) });
    for (const t of meta.topics) {
      const want = specs.find((s) => s.topic === t.name)?.numPartitions;
      if (want !== undefined && t.partitions.length !== want) mismatched.push(`${t.name} has ${t.partitions.length} partitions, config says ${want}`);
    }
    const described = await admin.describeConfigs({ resources: present.map((s) => ({ type: ConfigResourceTypes.TOPIC, name: s.topic, configNames: [TIMESTAMP_TYPE] })), includeSynonyms: false });
    for (const r of described.resources) {
      const type = r.configEntries.find((e) => e.configName === TIMESTAMP_TYPE)?.configValue;
      if (type !== 'LogAppendTime') mismatched.push(`${r.resourceName} stamps records with ${type ?? 'an unknown'} time, so consumer time lag follows the producers' clocks; to stamp them with the broker's: ${logAppendTimeCommand(cfg.brokers, r.resourceName)}`);
    }
  }
  return { created: missingNames, mismatched };
}
