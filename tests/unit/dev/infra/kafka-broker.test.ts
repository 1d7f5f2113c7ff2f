import { createHash } from 'node:crypto';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { brokerPaths, jarsUpToDate, newClusterId, probeKafka, renderServerProperties } from '../../../../src/dev/infra/kafka-broker.js';

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
  const props = parseProperties(renderServerProperties({ port: 19192, controllerPort: 19193, dataDir: '/state/kafka/data' }));

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
    ]) {
      expect(props.get(key), key).toBe('1');
    }
    expect(props.get('group.initial.rebalance.delay.ms')).toBe('0');
    expect(props.get('auto.create.topics.enable')).toBe('false');
  });

  it('is deterministic, so a running broker can be compared with the requested ports', () => {
    const a = renderServerProperties({ port: 9092, controllerPort: 9093, dataDir: '/d' });
    expect(renderServerProperties({ port: 9092, controllerPort: 9093, dataDir: '/d' })).toBe(a);
    expect(renderServerProperties({ port: 9094, controllerPort: 9093, dataDir: '/d' })).not.toBe(a);
  });
});

describe('newClusterId', () => {
  it('is 16 random bytes in URL-safe base64 without padding', () => {
    const id = newClusterId();
    expect(id).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(Buffer.from(id, 'base64url')).toHaveLength(16);
    expect(newClusterId()).not.toBe(id);
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
