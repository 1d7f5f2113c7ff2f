import type { Admin, ITopicConfig } from 'kafkajs';
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

export function groupId(namespace: string, role: 'processor' | 'status-sink' | 'dlq-sink' | 'retry-forwarder'): string {
  return `${namespace}sluice.${role}`;
}

export function topicSpecs(cfg: SluiceConfig['kafka'], namespace: string): ITopicConfig[] {
  const names = topicNames(namespace);
  const keys = Object.keys(names) as (keyof TopicNames)[];
  return keys.map((k) => ({
    topic: names[k],
    numPartitions: cfg.partitions[k],
    replicationFactor: cfg.replicationFactor,
    // The DLQ is an archive buffer: keep it long enough for a sink outage; others are work queues.
    configEntries: [{ name: 'retention.ms', value: String(k === 'dlq' ? 30 * 86_400_000 : 7 * 86_400_000) }],
  }));
}

/**
 * Creates missing topics. Existing topics are left alone (their partition count is a deliberate
 * operator decision once data flows), but a mismatch is reported so it does not go unnoticed.
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
  }
  return { created: missing.map((s) => s.topic), mismatched };
}
