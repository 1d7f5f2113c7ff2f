import { createHash } from 'node:crypto';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { brokerPaths, clusterNodes, jarsUpToDate, newClusterId, probeKafka, renderServerProperties } from '../../../../src/dev/infra/kafka-broker.js';

function parseProperties(text: string): Map<string, string> {
  const entries = text
    .split('\n')
    .filter((line) => line && !line.startsWith('#'))
    .map((line) => {
      const i = line.indexOf('=');
      return [line.slice(0, i), line.slice(i + 1)] as [string, string];
    });
  return new Map(entries);
}

describe('renderServerProperties', () => {
  const single = { nodeId: 1, port: 19192, controllerPort: 19193 };
  const props = parseProperties(renderServerProperties({ node: single, nodes: [single], dataDir: '/state/kafka/data' }));

  it('describes a combined single-node KRaft broker on the given ports', () => {
    expect(props.get('process.roles')).toBe('broker,controller');
    expect(props.get('node.id')).toBe('1');
    expect(props.get('controller.quorum.voters')).toBe('1@127.0.0.1:19193');
    expect(props.get('listeners')).toBe('PLAINTEXT://127.0.0.1:19192,CONTROLLER://127.0.0.1:19193');
    expect(props.get('advertised.listeners')).toBe('PLAINTEXT://127.0.0.1:19192');
    expect(props.get('controller.listener.names')).toBe('CONTROLLER');
    expect(props.get('listener.security.protocol.map')).toBe('CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT');
    expect(props.get('inter.broker.listener.name')).toBe('PLAINTEXT');
    expect(props.get('log.dirs')).toBe('/state/kafka/data');
  });

  it('sizes every internal topic for one node and never auto-creates topics', () => {
    for (const key of [
      'offsets.topic.replication.factor',
      'transaction.state.log.replication.factor',
      'transaction.state.log.min.isr',
      'share.coordinator.state.topic.replication.factor',
      'share.coordinator.state.topic.min.isr',
      'default.replication.factor',
      'min.insync.replicas',
    ]) {
      expect(props.get(key), key).toBe('1');
    }
    expect(props.get('group.initial.rebalance.delay.ms')).toBe('0');
    expect(props.get('auto.create.topics.enable')).toBe('false');
  });

  it('is deterministic, so a running broker can be compared with the requested ports', () => {
    const at = (port: number) => ({ nodeId: 1, port, controllerPort: 9093 });
    const a = renderServerProperties({ node: at(9092), nodes: [at(9092)], dataDir: '/d' });
    expect(renderServerProperties({ node: at(9092), nodes: [at(9092)], dataDir: '/d' })).toBe(a);
    expect(renderServerProperties({ node: at(9094), nodes: [at(9094)], dataDir: '/d' })).not.toBe(a);
  });
});

describe('a three-node cluster', () => {
  const nodes = clusterNodes(3, 9092, 9093);

  it('lays nodes out two ports apart from the base ports', () => {
    expect(nodes).toEqual([
      { nodeId: 1, port: 9092, controllerPort: 9093 },
      { nodeId: 2, port: 9094, controllerPort: 9095 },
      { nodeId: 3, port: 9096, controllerPort: 9097 },
    ]);
  });

  it('makes every node a voter of one quorum, listening on its own ports', () => {
    const second = parseProperties(renderServerProperties({ node: nodes[1]!, nodes, dataDir: '/d2' }));
    expect(second.get('node.id')).toBe('2');
    expect(second.get('controller.quorum.voters')).toBe('1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097');
    expect(second.get('listeners')).toBe('PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9095');
    expect(second.get('advertised.listeners')).toBe('PLAINTEXT://127.0.0.1:9094');
  });

  it('replicates internal and default topics three times with two in sync', () => {
    const props = parseProperties(renderServerProperties({ node: nodes[0]!, nodes, dataDir: '/d1' }));
    for (const key of ['default.replication.factor', 'offsets.topic.replication.factor', 'transaction.state.log.replication.factor', 'share.coordinator.state.topic.replication.factor']) {
      expect(props.get(key), key).toBe('3');
    }
    for (const key of ['min.insync.replicas', 'transaction.state.log.min.isr', 'share.coordinator.state.topic.min.isr']) {
      expect(props.get(key), key).toBe('2');
    }
  });

  it('keeps each node in its own directory, apart from a single node of the same state dir', () => {
    const dirs = [1, 2, 3].map((id) => brokerPaths('/s', id, 3).dir);
    expect(dirs).toEqual(['/s/kafka-3-nodes/node-1', '/s/kafka-3-nodes/node-2', '/s/kafka-3-nodes/node-3']);
    expect(brokerPaths('/s').dir).toBe('/s/kafka');
  });
});

describe('newClusterId', () => {
  it('is 16 random bytes in URL-safe base64 without padding', () => {
    const id = newClusterId();
    expect(id).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(Buffer.from(id, 'base64url')).toHaveLength(16);
    expect(newClusterId()).not.toBe(id);
  });

  it('never starts with "-", which the storage tool would take for an option', () => {
    // 0xf8 as the first byte encodes to "-" first.
    const draws = [Buffer.alloc(16, 0xf8), Buffer.alloc(16, 0x01)];
    const id = newClusterId(() => draws.shift()!);
    expect(Buffer.alloc(16, 0xf8).toString('base64url')).toMatch(/^-/);
    expect(id).toBe(Buffer.alloc(16, 0x01).toString('base64url'));
    expect(draws).toHaveLength(0);
  });
});

describe('brokerPaths', () => {
  it('puts everything under <stateDir>/kafka as absolute paths', () => {
    const p = brokerPaths('relative/state');
    for (const path of Object.values(p)) {
      expect(isAbsolute(path)).toBe(true);
      expect(path).toContain(join('relative', 'state', 'kafka'));
    }
  });
});

describe('jarsUpToDate', () => {
  let home: string;
  const pom = '<project>v1</project>';
  const pomSha = createHash('sha256').update(pom).digest('hex');

  beforeEach(async () => {
    home = await mkdtemp(join(tmpdir(), 'sluice-jars-'));
    await writeFile(join(home, 'pom.xml'), pom);
    await mkdir(join(home, 'libs'));
    await writeFile(join(home, 'libs', 'a.jar'), '');
    await writeFile(join(home, 'libs', 'b.jar'), '');
  });
  afterEach(() => rm(home, { recursive: true, force: true }));

  const writeMarker = (marker: unknown) => writeFile(join(home, 'libs', '.sluice-jars.json'), JSON.stringify(marker));

  it('is false without a marker (libs from an unknown fetch)', async () => {
    expect(await jarsUpToDate(home)).toBe(false);
  });

  it('is true when the marker matches the pom and every jar is present', async () => {
    await writeMarker({ pomSha256: pomSha, jars: ['a.jar', 'b.jar'] });
    expect(await jarsUpToDate(home)).toBe(true);
  });

  it('is false after the pom changed', async () => {
    await writeMarker({ pomSha256: pomSha, jars: ['a.jar', 'b.jar'] });
    await writeFile(join(home, 'pom.xml'), '<project>v2</project>');
    expect(await jarsUpToDate(home)).toBe(false);
  });

  it('is false when a jar is missing or the marker is garbled', async () => {
    await writeMarker({ pomSha256: pomSha, jars: ['a.jar', 'b.jar', 'c.jar'] });
    expect(await jarsUpToDate(home)).toBe(false);
    await writeFile(join(home, 'libs', '.sluice-jars.json'), '{not json');
    expect(await jarsUpToDate(home)).toBe(false);
  });
});

describe('probeKafka', () => {
  it('answers false quickly when nothing listens', async () => {
    const t0 = Date.now();
    expect(await probeKafka(['127.0.0.1:1'], 3_000)).toBe(false);
    expect(Date.now() - t0).toBeLessThan(3_000);
  });
});
