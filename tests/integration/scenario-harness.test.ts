import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { runScenario } from '../../src/dev/bench/scenarios/harness.js';
import { packageRoot } from '../../src/util/package-root.js';

/**
 * A smoke check of `bench scenario`: a few seconds of load through both systems, each started as
 * its own processes on the real Kafka, Redis and Postgres. Behaviour, not timing: every send is
 * answered and followed to its end, the figures add up, the chart is drawn.
 */
describe('the scenario harness', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-scenario-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('runs a scenario against Sluice and the naive system and reports both', async () => {
    const infra = inject('infra');
    process.env.KAFKA_BROKERS = infra.kafkaBrokers.join(',');
    process.env.REDIS_URL = infra.redisUrl;
    process.env.DATABASE_URL = infra.databaseUrl;
    const chartPath = join(dir, 'smoke.svg');
    const report = await runScenario({ name: 'smoke', timeScale: 1, seed: 3, json: true, chartPath, scenarioDir: join(packageRoot(), 'tests', 'fixtures', 'scenarios') });

    expect(Object.keys(report.systems)).toEqual(['sluice', 'naive']);
    for (const [name, f] of Object.entries(report.systems)) {
      // 4 s at 4/s and 1/s: 20 requests, each sent once more at most (one client retry).
      expect(f.requests, name).toBe(20);
      expect(f.offered, name).toBeGreaterThanOrEqual(20);
      expect(f.offered, name).toBeLessThanOrEqual(40);
      expect(f.dropped, name).toBe(0);
      expect(Object.values(f.answers).reduce((a, b) => a + b, 0), name).toBe(f.offered);
      expect(f.answers.unanswered, name).toBeUndefined();
      expect(f.lost, name).toBe(0);
      expect(f.duplicates, name).toBe(0);
      expect(f.providerCalls, name).toBeGreaterThan(0);
      expect(f.offeredCalls, name).toBe(f.offered * 2);
      expect(f.backlogPeak, name).toBeGreaterThan(0);
      expect(f.completedRequests, name).toBeGreaterThan(0);
      // Every process of the system is counted, and the system used some of the machine while sending.
      expect(Object.keys(f.cpuWhileSending!.byProcess).sort(), name).toEqual(['api', 'harness (load generator)', 'processor', 'provider-sim', 'rest of the machine', 'status-sink,dlq-sink']);
      expect(f.cpuWhileSending!.byProcess.api, name).toBeGreaterThan(0);
      expect(f.cpuWhileSending!.machineBusyPercent, name).toBeGreaterThanOrEqual(f.cpuWhileSending!.byProcess.api!);
    }
    expect(report.systems.sluice!.backlogBound).toBe(5_000);
    expect(report.systems.naive!.backlogBound).toBeNull();
    // The naive system answers every submission with 202: it has no admission to refuse with.
    expect(Object.keys(report.systems.naive!.answers)).toEqual(['accepted']);
    expect(report.targets.map((t) => t.target)).toEqual(['lost', 'duplicates']);
    expect(report.targets.every((t) => t.met)).toBe(true);
    const svg = readFileSync(chartPath, 'utf8');
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg).toContain('sluice');
    expect(svg).toContain('naive');
  }, 240_000);
});
