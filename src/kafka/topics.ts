import kafkajs, { type Admin, type ITopicConfig } from 'kafkajs';

// kafkajs is CommonJS, and Node's named-export detection does not find its enums.
const { ConfigResourceTypes } = kafkajs;
import type { SluiceConfig } from '../config/schema.js';

/** The contract's topic names (docs/contract.md); a namespace prefix lets environments share a cluster. */
export interface TopicNames {
  interactive: string;
  batch: string;
  retry: string;
  status: string;
  dlq: string;
}

export function topicNames(namespace: string): TopicNames {
  return {
    interactive: `${namespace}sluice.runs.interactive`,
    batch: `${namespace}sluice.runs.batch`,
    retry: `${namespace}sluice.runs.retry`,
    status: `${namespace}sluice.runs.status`,
    dlq: `${namespace}sluice.runs.dlq`,
  };
}

export type GroupRole = 'processor' | 'status-sink' | 'dlq-sink' | 'retry-forwarder';

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
  ];
  return groups.map(([role, topics]) => ({ role, group: groupId(namespace, role), topics }));
}

export function topicSpecs(cfg: SluiceConfig['kafka'], namespace: string): ITopicConfig[] {
  const names = topicNames(namespace);
  const keys = Object.keys(names) as (keyof TopicNames)[];
  return keys.map((k) => ({
    topic: names[k],
    numPartitions: cfg.partitions[k],
    replicationFactor: cfg.replicationFactor,
    configEntries: [
      // The DLQ is an archive buffer: keep it long enough for a sink outage; others are work queues.
      { name: 'retention.ms', value: String(k === 'dlq' ? 30 * 86_400_000 : 7 * 86_400_000) },
      // Records carry the broker's append time, so the lag monitor's time lag is one clock's, not each producer's.
      { name: TIMESTAMP_TYPE, value: 'LogAppendTime' },
    ],
  }));
}

const TIMESTAMP_TYPE = 'message.timestamp.type';

/** The command that switches an existing topic to append-time stamps, changing no other setting. */
export function logAppendTimeCommand(brokers: readonly string[], topic: string): string {
  return `kafka-configs.sh --bootstrap-server ${brokers.join(',')} --alter --entity-type topics --entity-name ${topic} --add-config ${TIMESTAMP_TYPE}=LogAppendTime`;
}

/**
 * Creates missing topics. Existing topics are left alone (their partition count is a deliberate
 * operator decision once data flows), but a mismatch is reported so it does not go unnoticed: a
 * partition count other than the config's, and records stamped with the producer's time instead
 * of the broker's. The stamp is not changed here: kafkajs offers only the non-incremental
 * AlterConfigs, which would reset every other setting of the topic an operator made.
 */
export async function ensureTopics(admin: Admin, cfg: SluiceConfig['kafka'], namespace: string): Promise<{ created: string[]; mismatched: string[] }> {
  const specs = topicSpecs(cfg, namespace);
  const existing = new Set(await admin.listTopics());
  const missing = specs.filter((s) => !existing.has(s.topic));
  if (missing.length > 0) {
    // Another instance may create the same topics at the same moment; createTopics tolerates that.
    await admin.createTopics({ topics: missing, waitForLeaders: true, timeout: 30_000 });
  }
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
  return { created: missing.map((s) => s.topic), mismatched };
}
