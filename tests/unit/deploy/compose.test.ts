import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { ENV_OVERRIDES, loadConfig } from '../../../src/config/load.js';

const compose = parse(readFileSync('docker-compose.yml', 'utf8')) as { services: Record<string, any> };
const pomKafkaVersion = /<kafka\.version>([^<]+)<\/kafka\.version>/.exec(readFileSync('infra/kafka/pom.xml', 'utf8'))?.[1];

/** docker-compose.yml cannot run on these machines, so its consistency with the code is checked here. */
describe('docker-compose.yml', () => {
  it('runs the same Kafka version as the Maven-fetched broker', () => {
    expect(pomKafkaVersion).toBeDefined();
    expect(compose.services.kafka.image).toBe(`apache/kafka:${pomKafkaVersion}`);
  });

  it('has the whole stack: Kafka, Redis, Postgres, Prometheus and Sluice', () => {
    expect(Object.keys(compose.services).sort()).toEqual(['kafka', 'postgres', 'prometheus', 'redis', 'sluice']);
  });

  it('configures Sluice only through environment variables Sluice reads', () => {
    const known = new Set(ENV_OVERRIDES.map((o) => o.env));
    for (const name of Object.keys(compose.services.sluice.environment)) expect(known, name).toContain(name);
  });

  it('gives a configuration that validates, with the API reachable from outside the container', () => {
    const env = compose.services.sluice.environment as Record<string, string>;
    const cfg = loadConfig({ env: Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)])) });
    expect(cfg.kafka.brokers).toEqual(['kafka:9092']);
    expect(cfg.api.host).toBe('0.0.0.0');
    expect(compose.services.sluice.ports).toContain(`${cfg.api.port}:${cfg.api.port}`);
    const prom = readFileSync('ops/prometheus/prometheus.yml', 'utf8');
    expect(prom).toContain(`sluice:${cfg.api.port}`);
  });

  it('keeps single-node Kafka settings in line with the local broker (replication factor 1, no auto-created topics)', () => {
    const env = compose.services.kafka.environment as Record<string, unknown>;
    expect(env.KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR).toBe(1);
    expect(env.KAFKA_AUTO_CREATE_TOPICS_ENABLE).toBe('false');
  });
});
