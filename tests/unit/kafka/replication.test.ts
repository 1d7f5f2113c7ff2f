import { describe, expect, it } from 'vitest';
import { defaultReplication, resolveReplication } from '../../../src/kafka/replication.js';

describe('defaultReplication', () => {
  it('keeps up to three copies and lets one of them be missing', () => {
    expect(defaultReplication(1)).toEqual({ replicationFactor: 1, minInsyncReplicas: 1 });
    expect(defaultReplication(2)).toEqual({ replicationFactor: 2, minInsyncReplicas: 1 });
    expect(defaultReplication(3)).toEqual({ replicationFactor: 3, minInsyncReplicas: 2 });
    expect(defaultReplication(7)).toEqual({ replicationFactor: 3, minInsyncReplicas: 2 });
  });
});

describe('resolveReplication', () => {
  it('follows the live cluster where the config is silent', () => {
    expect(resolveReplication({}, 1)).toEqual({ replicationFactor: 1, minInsyncReplicas: 1 });
    expect(resolveReplication({}, 3)).toEqual({ replicationFactor: 3, minInsyncReplicas: 2 });
  });

  it('derives the in-sync minimum from a configured replication factor', () => {
    expect(resolveReplication({ replicationFactor: 2 }, 5)).toEqual({ replicationFactor: 2, minInsyncReplicas: 1 });
    expect(resolveReplication({ replicationFactor: 1 }, 3)).toEqual({ replicationFactor: 1, minInsyncReplicas: 1 });
    expect(resolveReplication({ replicationFactor: 3, minInsyncReplicas: 3 }, 3)).toEqual({ replicationFactor: 3, minInsyncReplicas: 3 });
  });

  it('refuses, naming the field, what the cluster cannot honour', () => {
    expect(() => resolveReplication({ replicationFactor: 3 }, 2)).toThrow(/^kafka\.replicationFactor: 3 copies need at least 3 brokers, the cluster has 2 live/);
    expect(() => resolveReplication({ minInsyncReplicas: 2 }, 1)).toThrow(/^kafka\.minInsyncReplicas: 2 exceeds the replication factor 1/);
  });
});
