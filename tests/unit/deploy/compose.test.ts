import { readFileSync } from 'node:fs';
import { posix } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { ENV_OVERRIDES, loadConfig } from '../../../src/config/load.js';
import { productionProblems } from '../../../src/config/profile.js';

const compose = parse(readFileSync('docker-compose.yml', 'utf8')) as { services: Record<string, any> };
/** The environment the image sets (`ENV KEY=VALUE …` lines of the final stage). */
function imageEnv(): Record<string, string> {
  const stages = readFileSync('Dockerfile', 'utf8').split(/^FROM /m);
  const env: Record<string, string> = {};
  for (const line of stages[stages.length - 1]!.split('\n')) {
    const m = /^ENV\s+(.+)$/.exec(line.trim());
    if (m) for (const pair of m[1]!.split(/\s+/)) env[pair.slice(0, pair.indexOf('='))] = pair.slice(pair.indexOf('=') + 1);
  }
  return env;
}
/** A service's bind mounts: host path → container path. */
const volumeMounts = (service: string): Map<string, string> =>
  new Map((compose.services[service].volumes as string[]).map((v) => v.split(':') as [string, string]).map(([host, container]) => [host, container]));
const composeEnv = (): Record<string, string> => Object.fromEntries(Object.entries(compose.services.sluice.environment as Record<string, unknown>).map(([k, v]) => [k, String(v)]));

const pomKafkaVersion = /<kafka\.version>([^<]+)<\/kafka\.version>/.exec(readFileSync('infra/kafka/pom.xml', 'utf8'))?.[1];

/** docker-compose.yml cannot run on these machines, so its consistency with the code is checked here. */
describe('docker-compose.yml', () => {
  it('runs the same Kafka version as the Maven-fetched broker', () => {
    expect(pomKafkaVersion).toBeDefined();
    expect(compose.services.kafka.image).toBe(`apache/kafka:${pomKafkaVersion}`);
  });

  it('has the whole stack: Kafka, Redis, Postgres, Prometheus, Grafana and Sluice', () => {
    expect(Object.keys(compose.services).sort()).toEqual(['grafana', 'kafka', 'postgres', 'prometheus', 'redis', 'sluice']);
  });

  it('gives Prometheus its config and the rule files that config loads', () => {
    const mounts = volumeMounts('prometheus');
    const configPath = mounts.get('./ops/prometheus/prometheus.yml');
    expect(configPath).toBe('/etc/prometheus/prometheus.yml');
    const prom = parse(readFileSync('ops/prometheus/prometheus.yml', 'utf8')) as { rule_files: string[] };
    for (const pattern of prom.rule_files) expect(mounts.get(`./ops/prometheus/${posix.dirname(pattern)}`), pattern).toBe(posix.join(posix.dirname(configPath!), posix.dirname(pattern)));
  });

  it('gives Grafana the Prometheus service as its datasource and the dashboards where its provider looks', () => {
    const mounts = volumeMounts('grafana');
    expect(mounts.get('./ops/grafana/provisioning')).toBe('/etc/grafana/provisioning');
    const datasources = parse(readFileSync('ops/grafana/provisioning/datasources/prometheus.yml', 'utf8')) as { datasources: { url: string; type: string }[] };
    const promPort = (compose.services.prometheus.ports as string[])[0]!.split(':')[1];
    expect(datasources.datasources).toEqual([expect.objectContaining({ type: 'prometheus', url: `http://prometheus:${promPort}` })]);
    const providers = parse(readFileSync('ops/grafana/provisioning/dashboards/sluice.yml', 'utf8')) as { providers: { options: { path: string } }[] };
    expect(providers.providers.map((p) => p.options.path)).toEqual([mounts.get('./ops/grafana/dashboards')]);
    expect(compose.services.grafana.depends_on).toContain('prometheus');
  });

  it('configures Sluice only through environment variables Sluice reads', () => {
    const known = new Set(ENV_OVERRIDES.map((o) => o.env));
    for (const name of Object.keys(compose.services.sluice.environment)) expect(known, name).toContain(name);
  });

  it('gives a configuration that validates, with the API reachable from outside the container and the ops port, which Prometheus scrapes, from inside only', () => {
    const cfg = loadConfig({ env: { ...imageEnv(), ...composeEnv() } });
    expect(cfg.kafka.brokers).toEqual(['kafka:9092']);
    expect(cfg.api.host).toBe('0.0.0.0');
    expect(compose.services.sluice.ports).toContain(`${cfg.api.port}:${cfg.api.port}`);
    expect(cfg.opsPort).toBeGreaterThan(0);
    expect((compose.services.sluice.ports as string[]).some((p) => p.endsWith(`:${cfg.opsPort}`))).toBe(false);
    const prom = parse(readFileSync('ops/prometheus/prometheus.yml', 'utf8')) as { scrape_configs: { static_configs: { targets: string[] }[] }[] };
    expect(prom.scrape_configs.flatMap((c) => c.static_configs.flatMap((s) => s.targets))).toEqual([`sluice:${cfg.opsPort}`]);
  });

  it('keeps single-node Kafka settings in line with the local broker (replication factor 1, no auto-created topics)', () => {
    const env = compose.services.kafka.environment as Record<string, unknown>;
    expect(env.KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR).toBe(1);
    expect(env.KAFKA_AUTO_CREATE_TOPICS_ENABLE).toBe('false');
  });

  it('runs the demo under the dev profile, chosen explicitly over the image’s production default', () => {
    expect(compose.services.sluice.environment.SLUICE_PROFILE).toBe('dev');
    const cfg = loadConfig({ env: { ...imageEnv(), ...composeEnv() } });
    expect(cfg.profile).toBe('dev');
    expect(productionProblems(cfg)).toEqual([]);
  });
});

describe('Dockerfile', () => {
  it('runs the production profile, so the built-in demo config is refused unless dev is chosen', () => {
    expect(imageEnv()).toMatchObject({ NODE_ENV: 'production', SLUICE_PROFILE: 'production' });
    const cfg = loadConfig({ env: imageEnv() });
    expect(cfg.profile).toBe('production');
    expect(productionProblems(cfg).map((p) => p.field)).toEqual(expect.arrayContaining(['tenants.tenant-a.apiKeySha256', 'api.adminKeySha256', 'roles', 'anthropic.apiKey', 'localInfra']));
  });

  it('configures Sluice only through environment variables Sluice reads', () => {
    const known = new Set(ENV_OVERRIDES.map((o) => o.env));
    for (const name of Object.keys(imageEnv()).filter((n) => n.startsWith('SLUICE_'))) expect(known, name).toContain(name);
  });
});
