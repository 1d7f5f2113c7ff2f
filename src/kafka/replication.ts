/**
 * How many copies of each partition Sluice's topics keep, and how many must hold a record before
 * an acks=all produce succeeds. With three copies and two in sync, one broker can die without a
 * submission being refused or an acknowledged record being lost.
 */
export interface Replication {
  replicationFactor: number;
  minInsyncReplicas: number;
}

/** Sluice's defaults for a cluster of `brokers`: up to 3 copies, one of which may be missing. */
export function defaultReplication(brokers: number): Replication {
  const replicationFactor = Math.max(1, Math.min(3, brokers));
  return { replicationFactor, minInsyncReplicas: Math.max(1, Math.min(2, replicationFactor - 1)) };
}

/**
 * The replication the topics are created with: the config's where it says, else the defaults for
 * the live cluster. Throws, naming the config field, for what the cluster cannot honour.
 */
export function resolveReplication(cfg: Partial<Replication>, liveBrokers: number): Replication {
  const replicationFactor = cfg.replicationFactor ?? defaultReplication(liveBrokers).replicationFactor;
  const minInsyncReplicas = cfg.minInsyncReplicas ?? defaultReplication(replicationFactor).minInsyncReplicas;
  if (replicationFactor > liveBrokers) {
    throw new Error(`kafka.replicationFactor: ${replicationFactor} copies need at least ${replicationFactor} brokers, the cluster has ${liveBrokers} live`);
  }
  if (minInsyncReplicas > replicationFactor) {
    throw new Error(`kafka.minInsyncReplicas: ${minInsyncReplicas} exceeds the replication factor ${replicationFactor}, so no produce could succeed`);
  }
  return { replicationFactor, minInsyncReplicas };
}
