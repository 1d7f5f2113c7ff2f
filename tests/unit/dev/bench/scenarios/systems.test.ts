import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../../../../src/config/load.js';
import { localConfig } from '../../../../../src/dev/bench/bench-harness.js';
import { SYSTEM_BUILDERS, llmCallsPerRun, naiveSystem, sluiceSystem } from '../../../../../src/dev/bench/scenarios/systems.js';

const parsed = (doc: Record<string, any>) => parseConfig({ ...doc, localInfra: false }, { KAFKA_BROKERS: '127.0.0.1:9092', REDIS_URL: 'redis://127.0.0.1:6379', DATABASE_URL: 'postgres://x@127.0.0.1/x' }, 'test.yaml');

describe('scenario systems', () => {
  it('runs Sluice as local.yaml configures it, without changing the document it was given', () => {
    const local = localConfig();
    const before = JSON.stringify(local);
    expect(sluiceSystem(local)).toEqual(local);
    naiveSystem(local);
    expect(JSON.stringify(local)).toBe(before);
  });

  it('gives Sluice the scenario\'s tenant weights and the naive system none', () => {
    const weights = { tenantWeights: { 'tenant-a': 2, 'tenant-b': 0.5 } };
    const sluice = parsed(sluiceSystem(localConfig(), weights));
    expect([sluice.tenants['tenant-a']!.weight, sluice.tenants['tenant-b']!.weight, sluice.tenants['tenant-c']!.weight]).toEqual([2, 0.5, 1]);
    expect(sluice.tenants['tenant-a']!.fallback).toBe('degrade');
    const naive = parsed(SYSTEM_BUILDERS.naive(localConfig(), weights));
    expect(Object.values(naive.tenants).map((t) => t.weight)).toEqual([1, 1, 1]);
  });

  it('gives the naive system no bound that binds, no caps, breakers, pacing, deadlines or fallbacks, and the SDK default retries only', () => {
    const local = parsed(localConfig());
    const naive = parsed(naiveSystem(localConfig()));
    expect(naive.processor.enforceCaps).toBe(false);
    expect(naive.processor.maxInFlight).toBe(local.processor.maxInFlight);
    expect(naive.processor.pacing.enabled).toBe(false);
    expect(naive.processor.runRetry.maxAttempts).toBe(1);
    expect(naive.admission.maxBacklog).toBeGreaterThan(local.admission.maxBacklog * 1_000);
    expect(naive.api.deadlineMs.defaultInteractive).toBe(3_600_000);
    expect(naive.api.deadlineMs.defaultBatch).toBe(3_600_000);
    for (const t of Object.values(naive.tenants)) {
      expect(t.fallback).toBe('fail');
      expect(t.admission.bucket.capacity).toBeGreaterThanOrEqual(1_000_000);
      expect(t.admission.maxBacklog).toBeGreaterThanOrEqual(1_000_000);
    }
    for (const w of Object.values(naive.workflows)) expect(w.fallback).toBeUndefined();
    for (const d of Object.values(naive.dependencies)) {
      expect(d.retry.maxAttempts).toBe(1);
      expect(d.breaker.minimumCalls).toBe(100_000);
      expect(d.breaker.failureThreshold).toBe(100_000);
      expect(d.rateLimit).toBeUndefined();
      if (d.kind === 'llm') expect(d.sdkMaxRetries).toBe(2);
    }
    expect(local.dependencies.anthropic).toMatchObject({ sdkMaxRetries: 0 });
    // The same parts: tenants, workflows and dependencies are local.yaml's.
    expect(Object.keys(naive.tenants)).toEqual(Object.keys(local.tenants));
    expect(Object.keys(naive.workflows)).toEqual(Object.keys(local.workflows));
    expect(Object.keys(naive.dependencies)).toEqual(Object.keys(local.dependencies));
  });

  it('counts the LLM steps of each workflow, leaving out agent workflows (their model decides)', () => {
    expect(llmCallsPerRun(localConfig())).toEqual({ 'support-reply': 2, 'report-digest': 2 });
  });
});
