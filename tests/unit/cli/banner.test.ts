import { describe, expect, it } from 'vitest';
import { startBanner } from '../../../src/cli/banner.js';
import { loadConfig, parseConfig } from '../../../src/config/load.js';
import type { Metrics } from '../../../src/obs/metrics.js';
import type { RunningRoles } from '../../../src/roles/start-roles.js';
import { SECRETS, secretDoc } from '../config/secret-config.js';

const running: RunningRoles = { roles: ['api', 'processor'], apiUrl: 'http://127.0.0.1:8080', metrics: {} as Metrics, stop: async () => undefined };

describe('startBanner', () => {
  it('shows where Redis and Postgres are without their passwords', () => {
    const banner = startBanner(parseConfig(secretDoc()), running);
    expect(banner).toContain('Redis redis://:***@cache:6379');
    expect(banner).toContain('Postgres postgresql://app:***@db:5432/sluice?sslmode=require');
    expect(banner).not.toMatch(SECRETS);
  });

  it('shows a Redis Cluster by its seed nodes', () => {
    const banner = startBanner(parseConfig(secretDoc(), { REDIS_CLUSTER: '10.0.0.1:7000,10.0.0.2:7001' }), running);
    expect(banner).toContain('Redis cluster 10.0.0.1:7000,10.0.0.2:7001');
    expect(banner).not.toMatch(SECRETS);
  });

  it('says which profile runs, and offers the demo key only under dev', () => {
    const dev = startBanner(loadConfig({ env: {} }), running);
    expect(dev.split('\n')[0]).toBe('Sluice is running (dev profile): roles api, processor');
    expect(dev).toContain("-H 'Authorization: Bearer local-key-a'");
    // Both demo workflows the banner names exist in the demo config, and the agent's events are where the API serves them.
    for (const workflow of ['support-reply', 'support-agent']) expect(loadConfig({ env: {} }).workflows[workflow]).toBeDefined();
    expect(dev).toContain('"workflow":"support-agent"');
    expect(dev).toContain('http://127.0.0.1:8080/v1/runs/<runId>/events');
    // The Kafka path with the demo ingress secret, only where the ingress runs.
    expect(dev).not.toContain('local-ingress-secret-a');
    const withIngress = startBanner(loadConfig({ env: {} }), { ...running, roles: ['api', 'ingress'] });
    expect(withIngress).toContain("through Kafka: SluiceProducer ('sluice/producer') as tenant-a, secret 'local-ingress-secret-a'");
    // `sluice demo` as the next thing to try, where every role it needs runs here; its flags where this instance is not at its defaults.
    expect(withIngress).not.toContain('sluice demo');
    const everyRole: RunningRoles = { ...running, roles: ['api', 'ingress', 'processor', 'status-sink', 'provider-sim'] };
    expect(startBanner(loadConfig({ env: {} }), everyRole)).toContain('  next         npx sluice demo   (in another terminal; or npm run sluice -- demo)');
    expect(startBanner(loadConfig({ env: { KAFKA_BROKERS: '10.0.0.5:9092' } }), { ...everyRole, apiUrl: 'http://127.0.0.1:18080' })).toContain('npx sluice demo --api-url http://127.0.0.1:18080 --brokers 10.0.0.5:9092   (');
    const production = startBanner(parseConfig(secretDoc()), running);
    expect(production.split('\n')[0]).toBe('Sluice is running (production profile): roles api, processor');
    expect(production).not.toContain('local-key-a');
    expect(startBanner(parseConfig(secretDoc()), everyRole)).not.toContain('sluice demo');
    expect(production).toContain('API          http://127.0.0.1:8080');
    // The console's URL, with the demo admin key only where the demo config runs.
    expect(dev).toContain('console      http://127.0.0.1:8080/console   (log in with the admin key: local-admin-key)');
    expect(production).toContain('console      http://127.0.0.1:8080/console   (log in with the admin key)');
  });

  it("says the API port's metrics need the admin key, and shows the ops port's, which need none", () => {
    expect(startBanner(loadConfig({ env: {} }), running)).toContain("metrics      http://127.0.0.1:8080/metrics   (Authorization: Bearer local-admin-key)");
    expect(startBanner(parseConfig(secretDoc()), running)).toContain('metrics      http://127.0.0.1:8080/metrics   (Authorization: Bearer <admin key>)');
    const withOps = startBanner(loadConfig({ env: {} }), { ...running, opsUrl: 'http://127.0.0.1:9464' });
    expect(withOps).toContain('ops          http://127.0.0.1:9464/metrics   readiness http://127.0.0.1:9464/readyz   (no credentials: keep this port internal)');
  });
});
