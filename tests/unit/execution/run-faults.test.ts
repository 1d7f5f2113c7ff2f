import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import type { RetryPolicy } from '../../../src/retries/retry-policy.js';
import { StepError } from '../../../src/steps/step-error.js';
import {
  InfrastructureError,
  afterInfrastructureFailure,
  asInfrastructureError,
  infrastructureCall,
  infrastructureFailure,
  keepTryingDelayMs,
  resolveRunConfig,
} from '../../../src/execution/run-faults.js';

const policy: RetryPolicy = { maxAttempts: 4, baseMs: 500, capMs: 3_000 };
const NOW = 1_800_000_000_000;
const FAR = NOW + 3_600_000;
const decide = (failures: number, random: () => number, deadline = FAR) => afterInfrastructureFailure({ failures, policy, now: NOW, deadline, random });

describe('afterInfrastructureFailure', () => {
  it('tries again with full jitter over base · 2^(failures − 1), capped, until maxAttempts attempts failed', () => {
    expect(decide(1, () => 0.5)).toEqual({ kind: 'retry', at: NOW + 250 });
    expect(decide(2, () => 0.5)).toEqual({ kind: 'retry', at: NOW + 500 });
    expect(decide(3, () => 0.5)).toEqual({ kind: 'retry', at: NOW + 1_000 });
    expect(decide(4, () => 0.5)).toEqual({ kind: 'dead_letter' });
    expect(decide(5, () => 0.5)).toEqual({ kind: 'dead_letter' });
  });

  it('caps the wait at capMs', () => {
    const long = { ...policy, maxAttempts: 20 };
    expect(afterInfrastructureFailure({ failures: 15, policy: long, now: NOW, deadline: FAR, random: () => 0.999999 })).toEqual({ kind: 'retry', at: NOW + 2_999 });
  });

  it('never retries at once (a zero draw waits 1 ms), and at most just under the ceiling', () => {
    for (let failures = 1; failures < policy.maxAttempts; failures++) {
      const ceiling = Math.min(policy.capMs, policy.baseMs * 2 ** (failures - 1));
      expect(decide(failures, () => 0)).toEqual({ kind: 'retry', at: NOW + 1 });
      expect(decide(failures, () => 0.999999)).toEqual({ kind: 'retry', at: NOW + ceiling - 1 });
    }
  });

  it('dead-letters at the first failure when maxAttempts is 1', () => {
    expect(afterInfrastructureFailure({ failures: 1, policy: { ...policy, maxAttempts: 1 }, now: NOW, deadline: FAR, random: () => 0.5 })).toEqual({ kind: 'dead_letter' });
  });

  it('is due no later than a deadline still ahead, so the run is reported expired on time', () => {
    expect(decide(3, () => 0.5, NOW + 300)).toEqual({ kind: 'retry', at: NOW + 300 });
    expect(decide(3, () => 0.5, NOW + 1_000)).toEqual({ kind: 'retry', at: NOW + 1_000 });
    expect(decide(3, () => 0.5, NOW + 1_001)).toEqual({ kind: 'retry', at: NOW + 1_000 });
  });

  it('backs off as usual once the deadline has passed (recording the expiry is what fails), never in a busy loop', () => {
    expect(decide(1, () => 0.5, NOW)).toEqual({ kind: 'retry', at: NOW + 250 });
    expect(decide(2, () => 0.5, NOW - 60_000)).toEqual({ kind: 'retry', at: NOW + 500 });
  });

  it('still dead-letters after maxAttempts however near the deadline', () => {
    expect(decide(4, () => 0.5, NOW + 1)).toEqual({ kind: 'dead_letter' });
  });
});

describe('keepTryingDelayMs', () => {
  it('grows with the tries from baseMs, capped at capMs, and is never zero', () => {
    expect(keepTryingDelayMs(0, policy, () => 0)).toBe(500);
    expect(keepTryingDelayMs(0, policy, () => 0.5)).toBe(750);
    expect(keepTryingDelayMs(2, policy, () => 0.5)).toBe(1_500);
    expect(keepTryingDelayMs(50, policy, () => 0.999999)).toBe(3_000);
    expect(keepTryingDelayMs(1_000_000, policy, () => 0.5)).toBe(2_000);
  });
});

describe('InfrastructureError', () => {
  it('names the operation, what it was for, the system and the cause', () => {
    const e = new InfrastructureError('dependency_permit', 'order-lookup', new Error('Command timed out'));
    expect(e.message).toBe('taking a dependency permit for order-lookup (Redis) failed: Command timed out');
    expect(e.operation).toBe('dependency_permit');
    expect(e.name).toBe('InfrastructureError');
    expect((e.cause as Error).message).toBe('Command timed out');
    expect(new InfrastructureError('outcome_publish', undefined, 'socket hang up').message).toBe('publishing the run outcome (Kafka) failed: socket hang up');
  });

  it('keeps an infrastructure error as it is and makes anything else a processor fault', () => {
    const e = new InfrastructureError('retry_enqueue', undefined, new Error('x'));
    expect(asInfrastructureError(e)).toBe(e);
    const other = asInfrastructureError(new TypeError('cannot read properties of undefined'));
    expect(other.operation).toBe('unexpected');
    expect(other.message).toBe('running the attempt (processor) failed: cannot read properties of undefined');
    expect(asInfrastructureError(undefined).message).toBe('running the attempt (processor) failed: undefined');
  });

  it('ends a run as a retryable infrastructure_error that says how many attempts failed', () => {
    expect(infrastructureFailure(new InfrastructureError('dead_letter', undefined, new Error('KafkaJSNumberOfRetriesExceeded')), 8)).toEqual({
      reason: 'infrastructure_error',
      code: 'infrastructure_error',
      message: 'gave up after 8 failed attempts: producing to the DLQ topic (Kafka) failed: KafkaJSNumberOfRetriesExceeded',
      retryable: true,
    });
  });
});

describe('infrastructureCall', () => {
  it('resolves to what the call resolves to', async () => {
    expect(await infrastructureCall('breaker_admission', 'anthropic', async () => 42)).toBe(42);
  });

  it('names the operation and its subject when the call fails', async () => {
    const failed = infrastructureCall('dependency_permit', 'order-lookup', () => Promise.reject(new Error('Command timed out')));
    await expect(failed).rejects.toBeInstanceOf(InfrastructureError);
    await expect(failed).rejects.toMatchObject({ operation: 'dependency_permit', message: 'taking a dependency permit for order-lookup (Redis) failed: Command timed out' });
  });

  it('lets a step error through as it is: a permit wait that reached the deadline ends the step, not the attempt', async () => {
    const deadline = new StepError('deadline', 'order-lookup', 'no permit before the deadline', false);
    await expect(infrastructureCall('dependency_permit', 'order-lookup', () => Promise.reject(deadline))).rejects.toBe(deadline);
  });
});

describe('resolveRunConfig', () => {
  const config = loadConfig({ env: {} });

  it('finds a configured tenant and workflow', () => {
    const r = resolveRunConfig(config, { tenantId: 'tenant-a', workflow: 'support-reply' });
    expect(r.ok).toBe(true);
    if (r.ok) expect(r.workflow).toBe(config.workflows['support-reply']);
  });

  it('names an unknown tenant first, then an unknown workflow; neither is retryable', () => {
    expect(resolveRunConfig(config, { tenantId: 'tenant-z', workflow: 'nope' })).toEqual({
      ok: false,
      failure: { reason: 'unknown_tenant', code: 'unknown_tenant', message: 'tenant "tenant-z" is not configured on this processor', retryable: false },
    });
    expect(resolveRunConfig(config, { tenantId: 'tenant-a', workflow: 'nope' })).toEqual({
      ok: false,
      failure: { reason: 'unknown_workflow', code: 'unknown_workflow', message: 'workflow "nope" is not configured on this processor', retryable: false },
    });
  });

  it('does not take inherited object members for configured names', () => {
    for (const name of ['constructor', '__proto__', 'toString', 'hasOwnProperty']) {
      expect(resolveRunConfig(config, { tenantId: name, workflow: 'support-reply' })).toMatchObject({ ok: false, failure: { reason: 'unknown_tenant' } });
      expect(resolveRunConfig(config, { tenantId: 'tenant-a', workflow: name })).toMatchObject({ ok: false, failure: { reason: 'unknown_workflow' } });
    }
  });
});
