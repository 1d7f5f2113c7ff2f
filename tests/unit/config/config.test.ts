import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, ENV_OVERRIDES, defaultConfigPath, loadConfig, parseConfig } from '../../../src/config/load.js';
import { ROLES, configSchema } from '../../../src/config/schema.js';
import { dependencyOf } from '../../../src/config/workflows.js';

const sha = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');

const ADMIN = sha('admin-key');
const KEY_1 = sha('key-1');
const KEY_2 = sha('key-2');

/** A small, valid raw document; each test changes one thing. */
function baseDoc(): Record<string, any> {
  return {
    api: { adminKeySha256: ADMIN },
    tenants: {
      t1: { apiKeySha256: KEY_1 },
      t2: { apiKeySha256: KEY_2, fallback: 'fail', description: 'second' },
    },
    dependencies: {
      anthropic: { kind: 'llm', model: 'claude', timeouts: { connectMs: 100, readMs: 1000, totalMs: 2000 }, maxConcurrency: 4 },
      lookup: { kind: 'tool', url: '/tools/lookup', timeouts: { connectMs: 100, readMs: 1000, totalMs: 2000 }, maxConcurrency: 2 },
    },
    workflows: {
      wf: {
        steps: [
          { id: 'think', kind: 'llm', system: 'be brief' },
          { id: 'look', kind: 'tool', tool: 'lookup' },
        ],
      },
    },
  };
}

/** Runs `fn`, expects a ConfigError and returns it. */
function configError(fn: () => unknown): ConfigError {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(ConfigError);
  const err = caught as ConfigError;
  expect(err.name).toBe('ConfigError');
  return err;
}

describe('built-in config/local.yaml', () => {
  const cfg = loadConfig({ env: {} });

  it('is the file next to package.json', () => {
    expect(defaultConfigPath().endsWith(join('config', 'local.yaml'))).toBe(true);
    expect(existsSync(defaultConfigPath())).toBe(true);
  });

  it('declares tenants tenant-a, tenant-b and tenant-c with their key digests and fallbacks', () => {
    expect(Object.keys(cfg.tenants).sort()).toEqual(['tenant-a', 'tenant-b', 'tenant-c']);
    expect(cfg.tenants['tenant-a']!.apiKeySha256).toBe(sha('local-key-a'));
    expect(cfg.tenants['tenant-b']!.apiKeySha256).toBe(sha('local-key-b'));
    expect(cfg.tenants['tenant-c']!.apiKeySha256).toBe(sha('local-key-c'));
    expect(cfg.tenants['tenant-a']!.fallback).toBe('degrade');
    expect(cfg.tenants['tenant-c']!.fallback).toBe('fail');
    expect(cfg.api.adminKeySha256).toBe(sha('local-admin-key'));
  });

  it('declares the support-agent, support-reply and report-digest workflows', () => {
    expect(Object.keys(cfg.workflows).sort()).toEqual(['report-digest', 'support-agent', 'support-reply']);
    const agent = cfg.workflows['support-agent']!.steps[0]!;
    expect(agent).toMatchObject({ kind: 'agent', dependency: 'anthropic', tools: ['order-lookup', 'kb-search'], bounds: { maxTurns: 6, maxParallelTools: 4 } });
    const support = cfg.workflows['support-reply']!;
    expect(support.defaultClass).toBe('interactive');
    expect(support.steps.map((s) => s.id)).toEqual(['understand', 'lookup-order', 'reply']);
    expect(support.steps[0]).toMatchObject({ kind: 'llm', dependency: 'anthropic' });
    expect(support.steps[1]).toMatchObject({ kind: 'tool', tool: 'order-lookup' });
    const digest = cfg.workflows['report-digest']!;
    expect(digest.defaultClass).toBe('batch');
    expect(digest.steps.map((s) => s.id)).toEqual(['plan', 'report-sales', 'report-refunds', 'summarize', 'push']);
  });

  it('declares the dependencies with their kinds and budgets', () => {
    expect(Object.keys(cfg.dependencies).sort()).toEqual(['anthropic', 'kb-search', 'notify', 'order-lookup', 'report']);
    const anthropic = cfg.dependencies.anthropic!;
    expect(anthropic.kind).toBe('llm');
    if (anthropic.kind === 'llm') {
      expect(anthropic.model).toMatch(/^claude-/);
      expect(anthropic.maxTokens).toBeGreaterThan(0);
    }
    expect(cfg.dependencies['order-lookup']).toMatchObject({ kind: 'tool', url: '/tools/order-lookup' });
    expect(cfg.dependencies.report).toMatchObject({ kind: 'tool', url: '/tools/report' });
    expect(cfg.dependencies.notify).toMatchObject({ kind: 'tool', url: '/tools/notify' });
    for (const dep of Object.values(cfg.dependencies)) {
      expect(dep.timeouts.totalMs).toBeGreaterThanOrEqual(dep.timeouts.connectMs);
      expect(dep.maxConcurrency).toBeGreaterThan(0);
    }
  });

  it('only references dependencies of the right kind from its workflow steps', () => {
    for (const wf of Object.values(cfg.workflows)) {
      for (const step of wf.steps) {
        const dep = cfg.dependencies[dependencyOf(step)];
        expect(dep?.kind).toBe(step.kind === 'tool' ? 'tool' : 'llm');
      }
    }
  });

  it('keeps the file values and fills the rest with defaults', () => {
    expect(cfg.profile).toBe('dev');
    expect(cfg.localInfra).toBe(true);
    expect(cfg.api.port).toBe(8080);
    expect(cfg.simulator.port).toBe(8089);
    expect(cfg.kafka.brokers).toEqual(['127.0.0.1:9092']);
    expect(cfg.roles).toEqual([...ROLES]);
  });

  it('is read from SLUICE_CONFIG when no path is given', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sluice-config-'));
    try {
      const file = join(dir, 'other.yaml');
      await writeFile(file, JSON.stringify({ ...baseDoc(), instanceId: 'from-env-path' }));
      const other = loadConfig({ env: { SLUICE_CONFIG: file } });
      expect(other.instanceId).toBe('from-env-path');
      expect(Object.keys(other.tenants)).toEqual(['t1', 't2']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('resolves a relative path against the working directory', () => {
    const rel = relative(process.cwd(), defaultConfigPath());
    const viaRelative = loadConfig({ path: rel, env: {} });
    expect(Object.keys(viaRelative.tenants).sort()).toEqual(['tenant-a', 'tenant-b', 'tenant-c']);
  });

  it('applies environment overrides on top of the file', () => {
    const withEnv = loadConfig({ env: { KAFKA_BROKERS: 'k1:9092,k2:9093', SLUICE_API_PORT: '9999' } });
    expect(withEnv.kafka.brokers).toEqual(['k1:9092', 'k2:9093']);
    expect(withEnv.api.port).toBe(9999);
  });
});

describe('parseConfig defaults', () => {
  const cfg = parseConfig(baseDoc());

  it('fills top-level and nested defaults', () => {
    expect(cfg.roles).toEqual(['api', 'ingress', 'processor', 'status-sink', 'dlq-sink', 'lag-monitor', 'provider-sim']);
    expect(cfg.profile).toBe('production');
    expect(cfg.opsPort).toBe(0);
    expect(cfg.stateDir).toBe('.sluice');
    expect(cfg.localInfra).toBe(false);
    expect(cfg.logLevel).toBe('info');
    expect(cfg.instanceId).toBeUndefined();
    expect(cfg.kafka).toEqual({
      brokers: ['127.0.0.1:9092'],
      clientId: 'sluice',
      partitions: { interactive: 6, batch: 6, retry: 3, status: 6, dlq: 3, requests: 6 },
      produceTimeoutMs: 5000,
      sessionTimeoutMs: 30000,
      heartbeatIntervalMs: 3000,
      maxBatchBytes: 1_000_000,
    });
    expect(cfg.redis.url).toBe('redis://127.0.0.1:6379');
    expect(cfg.postgres).toEqual({ url: 'postgresql://postgres@127.0.0.1:5432/sluice', poolSize: 10, statementTimeoutMs: 5000 });
    expect(cfg.schemaRegistry).toEqual({ timeoutMs: 5000 });
    expect(cfg.api).toEqual({
      host: '127.0.0.1',
      port: 8080,
      bodyLimitBytes: 256 * 1024,
      deadlineMs: { defaultInteractive: 30_000, defaultBatch: 3_600_000, min: 1_000, max: 86_400_000 },
      adminKeySha256: ADMIN,
      input: { maxDepth: 64, maxBytes: 256 * 1024 },
      recordAdmissionTimeoutMs: 1_000,
      admissionRows: { writeBehind: true, batchSize: 500, maxWaitMs: 5, maxPending: 20_000, drainMs: 5_000 },
      trustProxy: false,
      console: { enable: true, sessionTtlSec: 28_800, sampleMs: 5_000 },
      authFailureLimit: { attempts: 10, perSec: 60, maxAddresses: 10_000 },
    });
    expect(cfg.processor).toEqual({ maxInFlight: 30, interactiveLifoAfterMs: 500, partitionBuffer: 100, shutdownGraceMs: 20_000, produceTimeoutMs: 10_000, permitLeaseMs: 15_000, enforceCaps: true, runRetry: { maxAttempts: 3, baseMs: 1_000, capMs: 30_000 }, maxInlineRetryWaitMs: 1_000, infraRetry: { maxAttempts: 8, baseMs: 500, capMs: 30_000 }, maxStepOutputBytes: 262_144, maxResultBytes: 524_288, pacing: { enabled: true, maxInlineWaitMs: 1_000, observedLimitTtlMs: 600_000, interactiveReserve: 1, fairShare: { borrowReserve: 0.2, demandWindowMs: 5_000, refreshMs: 1_000 } } });
    expect(cfg.statusSink).toEqual({ batchSize: 500 });
    expect(cfg.lagMonitor).toEqual({ enable: true, intervalMs: 15_000, windowMs: 300_000, leaseMs: 15_000, requestTimeoutMs: 10_000 });
    expect(cfg.simulator).toEqual({ host: '127.0.0.1', port: 8089, anthropicLatencyMs: 50, anthropicJitterMs: 20 });
    expect(cfg.anthropic).toEqual({});
  });

  it('fills tenant, workflow, step and dependency defaults', () => {
    // The default entry bucket (60, refilled 10/s), enforced, with a bounded backlog.
    const admission = { mode: 'enforce', bucket: { capacity: 60, refillPerSec: 10 }, maxBacklog: 500 };
    const reads = { bucket: { capacity: 200, refillPerSec: 100 }, maxStreams: 100 };
    expect(cfg.tenants.t1).toEqual({ apiKeySha256: KEY_1, description: '', fallback: 'degrade', maxConcurrency: 16, weight: 1, admission, reads });
    expect(cfg.tenants.t2).toEqual({ apiKeySha256: KEY_2, description: 'second', fallback: 'fail', maxConcurrency: 16, weight: 1, admission, reads });
    expect(cfg.admission).toMatchObject({ maxBacklog: 5000, emergencyRefillFactor: 0.5, idempotencyTtlSec: 86_400 });
    // Redis unreachable: refuse (503) unless a fail-open fallback is chosen explicitly.
    expect(cfg.admission.redisOutage).toEqual({ policy: 'fail-closed', localBucket: { capacity: 20, refillPerSec: 2 }, maxAdmittedPerOutage: 500 });
    expect(cfg.limits).toEqual({ global: 64, batchShare: 0.8 });
    expect(cfg.workflows.wf!.description).toBe('');
    expect(cfg.workflows.wf!.defaultClass).toBe('interactive');
    expect(cfg.workflows.wf!.maxConcurrency).toBe(32);
    expect(cfg.workflows.wf!.steps[0]).toEqual({ id: 'think', kind: 'llm', dependency: 'anthropic', system: 'be brief' });
    expect(cfg.dependencies.anthropic).toMatchObject({ kind: 'llm', maxTokens: 512 });
    expect(cfg.dependencies.anthropic!.rateLimit).toBeUndefined();
  });

  it('keeps rate limits as given, with a one-second burst by default', () => {
    const doc = baseDoc();
    doc.dependencies.anthropic.rateLimit = { requestsPerMinute: 50, inputTokensPerMinute: 40_000, outputTokensPerMinute: 8_000 };
    doc.dependencies.lookup.rateLimit = { requestsPerSecond: 2.5 };
    const parsed = parseConfig(doc);
    expect(parsed.dependencies.anthropic!.rateLimit).toEqual({ requestsPerMinute: 50, inputTokensPerMinute: 40_000, outputTokensPerMinute: 8_000, burstSeconds: 1 });
    expect(parsed.dependencies.lookup!.rateLimit).toEqual({ requestsPerSecond: 2.5, burstSeconds: 1 });
    expect(parseConfig({ ...baseDoc(), processor: { pacing: { enabled: false } } }).processor.pacing).toEqual({ enabled: false, maxInlineWaitMs: 1_000, observedLimitTtlMs: 600_000, interactiveReserve: 1, fairShare: { borrowReserve: 0.2, demandWindowMs: 5_000, refreshMs: 1_000 } });
  });

  it('does not modify the raw document it was given', () => {
    const raw = baseDoc();
    const before = JSON.stringify(raw);
    parseConfig(raw, { KAFKA_BROKERS: 'x:1', SLUICE_API_PORT: '1234' });
    expect(JSON.stringify(raw)).toBe(before);
  });

  it('treats null and undefined documents as empty and names every required field', () => {
    for (const raw of [null, undefined]) {
      const err = configError(() => parseConfig(raw));
      expect(err.fields).toEqual(expect.arrayContaining(['api', 'tenants', 'dependencies', 'workflows']));
    }
  });

  it('the schema itself accepts the base document', () => {
    expect(configSchema.safeParse(baseDoc()).success).toBe(true);
  });
});

describe('breaker.rampUp', () => {
  it('is absent unless configured, and takes its defaults when given empty', () => {
    expect(parseConfig(baseDoc()).dependencies.anthropic!.breaker.rampUp).toBeUndefined();
    const doc = baseDoc();
    doc.dependencies.anthropic.breaker = { rampUp: {} };
    expect(parseConfig(doc).dependencies.anthropic!.breaker.rampUp).toEqual({ initialFraction: 0.1, stepFraction: 0.1, intervalMs: 1_000 });
  });

  it('names the field of a bad ramp', () => {
    for (const [rampUp, field] of [
      [{ initialFraction: 0 }, 'dependencies.anthropic.breaker.rampUp.initialFraction'],
      [{ initialFraction: 1.5 }, 'dependencies.anthropic.breaker.rampUp.initialFraction'],
      [{ stepFraction: -0.1 }, 'dependencies.anthropic.breaker.rampUp.stepFraction'],
      [{ intervalMs: 10 }, 'dependencies.anthropic.breaker.rampUp.intervalMs'],
      [{ initialFraction: 0.01, stepFraction: 0.001, intervalMs: 600_000 }, 'dependencies.anthropic.breaker.rampUp.stepFraction'],
    ] as const) {
      const doc = baseDoc();
      doc.dependencies.anthropic.breaker = { rampUp };
      expect(configError(() => parseConfig(doc)).fields, JSON.stringify(rampUp)).toContain(field);
    }
  });
});

describe('dependencies.<name>.adaptiveConcurrency', () => {
  it('is absent unless configured, and takes its defaults with only min given', () => {
    expect(parseConfig(baseDoc()).dependencies.anthropic!.adaptiveConcurrency).toBeUndefined();
    const doc = baseDoc();
    doc.dependencies.anthropic.adaptiveConcurrency = { min: 1 };
    expect(parseConfig(doc).dependencies.anthropic!.adaptiveConcurrency).toEqual({ min: 1, decreaseFactor: 0.7, cooldownMs: 1_000, idleResetMs: 600_000 });
    doc.dependencies.lookup.adaptiveConcurrency = { min: 1, max: 6, decreaseFactor: 0.5, latencyTargetMs: 800, cooldownMs: 0, idleResetMs: 1_000 };
    expect(parseConfig(doc).dependencies.lookup!.adaptiveConcurrency).toEqual({ min: 1, max: 6, decreaseFactor: 0.5, latencyTargetMs: 800, cooldownMs: 0, idleResetMs: 1_000 });
  });

  it('names the field of a bad value', () => {
    const at = 'dependencies.anthropic.adaptiveConcurrency';
    for (const [adaptive, field] of [
      [{}, `${at}.min`],
      [{ min: 0 }, `${at}.min`],
      [{ min: 1.5 }, `${at}.min`],
      [{ min: 2, max: 1 }, `${at}.max`],
      [{ min: 5 }, `${at}.min`],
      [{ min: 1, decreaseFactor: 1 }, `${at}.decreaseFactor`],
      [{ min: 1, decreaseFactor: 0 }, `${at}.decreaseFactor`],
      [{ min: 1, latencyTargetMs: 0 }, `${at}.latencyTargetMs`],
      [{ min: 1, cooldownMs: -1 }, `${at}.cooldownMs`],
      [{ min: 1, idleResetMs: 999 }, `${at}.idleResetMs`],
    ] as const) {
      const doc = baseDoc();
      doc.dependencies.anthropic.adaptiveConcurrency = adaptive;
      expect(configError(() => parseConfig(doc)).fields, JSON.stringify(adaptive)).toEqual([field]);
    }
  });

  it('takes trusted proxies as true, false or addresses and CIDR ranges, and names the field of a bad one', () => {
    for (const trustProxy of [true, false, ['127.0.0.1'], ['10.0.0.0/8', 'fd00::/8', '::1']]) {
      const doc = baseDoc();
      doc.api.trustProxy = trustProxy;
      expect(parseConfig(doc).api.trustProxy).toEqual(trustProxy);
    }
    for (const [trustProxy, field] of [
      [['10.0.0.0/33'], 'api.trustProxy'],
      [['proxy.local'], 'api.trustProxy'],
      [[], 'api.trustProxy'],
      [2, 'api.trustProxy'],
    ] as const) {
      const doc = baseDoc();
      doc.api.trustProxy = trustProxy;
      expect(configError(() => parseConfig(doc)).fields.map((f) => f.replace(/\.\d+$/, '')), JSON.stringify(trustProxy)).toEqual([field]);
    }
    const doc = baseDoc();
    doc.api.authFailureLimit = { attempts: 0 };
    expect(configError(() => parseConfig(doc)).fields).toEqual(['api.authFailureLimit.attempts']);
    // The login's own limit became the failed-authentication one: a config that still sets it is told where it went.
    const moved = baseDoc();
    moved.api.console = { loginRateLimit: { attempts: 4 } };
    const err = configError(() => parseConfig(moved));
    expect(err.fields).toEqual(['api.console.loginRateLimit']);
    expect(err.message).toContain('moved to api.authFailureLimit');
  });

  it('takes ingress.maxInFlight records of a partition at once, 32 by default, and names the field of a bad one', () => {
    expect(parseConfig(baseDoc()).ingress.maxInFlight).toBe(32);
    expect(parseConfig({ ...baseDoc(), ingress: { maxInFlight: 1 } }).ingress.maxInFlight).toBe(1);
    for (const maxInFlight of [0, 1.5, 1_001, '8']) {
      expect(configError(() => parseConfig({ ...baseDoc(), ingress: { maxInFlight } })).fields, JSON.stringify(maxInFlight)).toEqual(['ingress.maxInFlight']);
    }
  });

  it('names the field of a bad admission-row batch', () => {
    for (const [rows, field] of [
      [{ batchSize: 0 }, 'api.admissionRows.batchSize'],
      [{ maxWaitMs: -1 }, 'api.admissionRows.maxWaitMs'],
      [{ maxWaitMs: 1_001 }, 'api.admissionRows.maxWaitMs'],
      [{ writeBehind: 'yes' }, 'api.admissionRows.writeBehind'],
      [{ batchSize: 100, maxPending: 99 }, 'api.admissionRows.maxPending'],
    ] as const) {
      const doc = baseDoc();
      doc.api.admissionRows = rows;
      expect(configError(() => parseConfig(doc)).fields, JSON.stringify(rows)).toEqual([field]);
    }
    const doc = baseDoc();
    doc.api.admissionRows = { writeBehind: false, batchSize: 50, maxWaitMs: 0 };
    expect(parseConfig(doc).api.admissionRows).toEqual({ writeBehind: false, batchSize: 50, maxWaitMs: 0, maxPending: 20_000, drainMs: 5_000 });
  });

  it('lets min exceed maxConcurrency when max is given (the permit limit may be raised at run time)', () => {
    const doc = baseDoc();
    doc.dependencies.anthropic.adaptiveConcurrency = { min: 5, max: 10 };
    expect(parseConfig(doc).dependencies.anthropic!.adaptiveConcurrency).toMatchObject({ min: 5, max: 10 });
  });
});

describe('parseConfig environment overrides', () => {
  it('splits KAFKA_BROKERS on commas, trimming blanks and empty items', () => {
    const cfg = parseConfig(baseDoc(), { KAFKA_BROKERS: ' a.example:9092, b.example:9093 ,,c:1 ' });
    expect(cfg.kafka.brokers).toEqual(['a.example:9092', 'b.example:9093', 'c:1']);
  });

  it('keeps the other kafka fields of the file when KAFKA_BROKERS is set', () => {
    const doc = baseDoc();
    doc.kafka = { clientId: 'from-file', brokers: ['file:1'] };
    const cfg = parseConfig(doc, { KAFKA_BROKERS: 'env:2' });
    expect(cfg.kafka.brokers).toEqual(['env:2']);
    expect(cfg.kafka.clientId).toBe('from-file');
  });

  it('parses SLUICE_API_PORT as an integer', () => {
    const cfg = parseConfig(baseDoc(), { SLUICE_API_PORT: '9090' });
    expect(cfg.api.port).toBe(9090);
    expect(cfg.api.adminKeySha256).toBe(ADMIN);
  });

  it('parses the other integer overrides', () => {
    const cfg = parseConfig(baseDoc(), { SLUICE_SIM_PORT: '18089', SLUICE_OPS_PORT: '9100' });
    expect(cfg.simulator.port).toBe(18089);
    expect(cfg.opsPort).toBe(9100);
  });

  it('takes the simulator\'s starting anthropic rate limits, and names a bad one', () => {
    const doc = baseDoc();
    doc.simulator = { anthropicRateLimit: { requestsPerMinute: 600, outputTokensPerMinute: 40_000 } };
    expect(parseConfig(doc, {}).simulator.anthropicRateLimit).toEqual({ requestsPerMinute: 600, outputTokensPerMinute: 40_000 });
    doc.simulator = { anthropicRateLimit: { requestsPerMinute: 0.5 } };
    expect(configError(() => parseConfig(doc, {})).fields).toEqual(['simulator.anthropicRateLimit.requestsPerMinute']);
    doc.simulator = { anthropicRateLimit: { requestsPerSecond: 5 } };
    expect(new Set(configError(() => parseConfig(doc, {})).fields)).toEqual(new Set(['simulator.anthropicRateLimit']));
    doc.simulator = { anthropicRateLimit: {} };
    expect(configError(() => parseConfig(doc, {})).fields).toEqual(['simulator.anthropicRateLimit']);
  });

  it('takes LLM prices by model, with no models by default', () => {
    expect(parseConfig(baseDoc()).pricing).toEqual({ models: {} });
    const models = { claude: { inputPerMillionTokens: 3, outputPerMillionTokens: 15, cacheReadPerMillionTokens: 0 } };
    expect(parseConfig({ ...baseDoc(), pricing: { models } }).pricing.models).toEqual(models);
  });

  it.each([
    ['a negative price', { inputPerMillionTokens: -1, outputPerMillionTokens: 15 }, 'pricing.models.claude.inputPerMillionTokens'],
    ['an infinite price (YAML .inf)', { inputPerMillionTokens: 3, outputPerMillionTokens: Infinity }, 'pricing.models.claude.outputPerMillionTokens'],
    ['a price that is not a number', { inputPerMillionTokens: 3, outputPerMillionTokens: 15, cacheWritePerMillionTokens: 'cheap' }, 'pricing.models.claude.cacheWritePerMillionTokens'],
    ['a missing output price', { inputPerMillionTokens: 3 }, 'pricing.models.claude.outputPerMillionTokens'],
  ])('rejects %s, naming the field', (_, price, field) => {
    const err = configError(() => parseConfig({ ...baseDoc(), pricing: { models: { claude: price } } }));
    expect(err.fields).toEqual([field]);
  });

  it('rejects SLUICE_API_PORT=abc and names the field and the variable', () => {
    const err = configError(() => parseConfig(baseDoc(), { SLUICE_API_PORT: 'abc' }));
    expect(err.message).toContain('api.port (from SLUICE_API_PORT)');
    expect(err.fields).toEqual(['api.port']);
  });

  it('rejects an out-of-range SLUICE_API_PORT', () => {
    const err = configError(() => parseConfig(baseDoc(), { SLUICE_API_PORT: '70000' }));
    expect(err.message).toContain('api.port (from SLUICE_API_PORT)');
  });

  it('names the list variable when one of its items is invalid', () => {
    // Issues on list overrides are reported at the item (kafka.brokers.0), not the list itself.
    const err = configError(() => parseConfig(baseDoc(), { KAFKA_BROKERS: 'good:9092,kafka-without-port' }));
    expect(err.fields).toEqual(['kafka.brokers.1']);
    expect(err.message).toContain('kafka.brokers.1 (from KAFKA_BROKERS)');
  });

  it('takes Redis Cluster seed nodes from REDIS_CLUSTER, and names a bad one', () => {
    expect(parseConfig(baseDoc()).redis.cluster).toBeUndefined();
    expect(parseConfig(baseDoc(), { REDIS_CLUSTER: '10.0.0.1:7000, 10.0.0.2:7001' }).redis.cluster).toEqual(['10.0.0.1:7000', '10.0.0.2:7001']);
    const err = configError(() => parseConfig(baseDoc(), { REDIS_CLUSTER: '10.0.0.1:7000,no-port' }));
    expect(err.fields).toEqual(['redis.cluster.1']);
    expect(err.message).toContain('redis.cluster.1 (from REDIS_CLUSTER)');
  });

  it('rejects an empty redis.cluster list, naming the field', () => {
    expect(configError(() => parseConfig({ ...baseDoc(), redis: { cluster: [] } })).fields).toEqual(['redis.cluster']);
  });

  it('ignores empty environment variables', () => {
    const doc = baseDoc();
    doc.api.port = 1111;
    const cfg = parseConfig(doc, { SLUICE_API_PORT: '', KAFKA_BROKERS: '' });
    expect(cfg.api.port).toBe(1111);
    expect(cfg.kafka.brokers).toEqual(['127.0.0.1:9092']);
  });

  it('applies text and list overrides to their single field', () => {
    const cfg = parseConfig(baseDoc(), {
      SLUICE_ROLES: 'api, processor',
      SLUICE_INSTANCE_ID: 'node-7',
      SLUICE_LOG_LEVEL: 'debug',
      SLUICE_STATE_DIR: '/var/lib/sluice',
      SLUICE_NAMESPACE: 'test-1',
      REDIS_URL: 'redis://cache:6379',
      DATABASE_URL: 'postgres://db/sluice',
      SCHEMA_REGISTRY_URL: 'http://registry:8081',
      ANTHROPIC_API_KEY: 'sk-test',
      ANTHROPIC_BASE_URL: 'http://sim:8089',
    });
    expect(cfg.roles).toEqual(['api', 'processor']);
    expect(cfg.instanceId).toBe('node-7');
    expect(cfg.logLevel).toBe('debug');
    expect(cfg.stateDir).toBe('/var/lib/sluice');
    expect(cfg.namespace).toBe('test-1');
    expect(cfg.redis.url).toBe('redis://cache:6379');
    expect(cfg.postgres.url).toBe('postgres://db/sluice');
    expect(cfg.schemaRegistry.url).toBe('http://registry:8081');
    expect(cfg.anthropic).toEqual({ apiKey: 'sk-test', baseUrl: 'http://sim:8089' });
  });

  it('takes the profile from SLUICE_PROFILE and names the variable when it is not one', () => {
    expect(parseConfig(baseDoc(), { SLUICE_PROFILE: 'dev' }).profile).toBe('dev');
    const err = configError(() => parseConfig(baseDoc(), { SLUICE_PROFILE: 'staging' }));
    expect(err.fields).toEqual(['profile']);
    expect(err.message).toContain('profile (from SLUICE_PROFILE)');
  });

  it('names the variable when a text override is invalid', () => {
    const err = configError(() => parseConfig(baseDoc(), { REDIS_URL: 'http://not-redis' }));
    expect(err.message).toContain('redis.url (from REDIS_URL)');
  });

  it('maps every override to a distinct field', () => {
    const paths = ENV_OVERRIDES.map((o) => o.path.join('.'));
    expect(new Set(paths).size).toBe(paths.length);
    expect(new Set(ENV_OVERRIDES.map((o) => o.env)).size).toBe(ENV_OVERRIDES.length);
  });
});

describe('parseConfig errors name the field path', () => {
  it('a lag monitor window holding fewer than 3 polls, or more than 1,000', () => {
    for (const lagMonitor of [{ intervalMs: 1_000, windowMs: 2_999 }, { intervalMs: 100, windowMs: 100_001 }]) {
      const err = configError(() => parseConfig({ ...baseDoc(), lagMonitor }));
      expect(err.fields).toEqual(['lagMonitor.windowMs']);
    }
    expect(parseConfig({ ...baseDoc(), lagMonitor: { intervalMs: 1_000, windowMs: 3_000 } }).lagMonitor.windowMs).toBe(3_000);
    expect(parseConfig({ ...baseDoc(), lagMonitor: { intervalMs: 100, windowMs: 100_000 } }).lagMonitor.windowMs).toBe(100_000);
  });

  it('a lag monitor interval out of range', () => {
    expect(configError(() => parseConfig({ ...baseDoc(), lagMonitor: { intervalMs: 99, windowMs: 30_000 } })).fields).toEqual(['lagMonitor.intervalMs']);
  });

  it('a rate limit that is not a positive finite number, on any of its fields', () => {
    for (const [field, value] of [
      ['requestsPerSecond', 0],
      ['requestsPerMinute', -5],
      ['inputTokensPerMinute', 'many'],
      ['outputTokensPerMinute', Number.POSITIVE_INFINITY],
      ['burstSeconds', 0],
    ] as const) {
      const doc = baseDoc();
      doc.dependencies.anthropic.rateLimit = { requestsPerMinute: 50, [field]: value };
      expect(configError(() => parseConfig(doc)).fields).toEqual([`dependencies.anthropic.rateLimit.${field}`]);
    }
  });

  it('an empty rate limit', () => {
    const doc = baseDoc();
    doc.dependencies.lookup.rateLimit = {};
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(['dependencies.lookup.rateLimit']);
    expect(err.message).toContain('needs at least one limit');
  });

  it('token limits on a tool dependency', () => {
    const doc = baseDoc();
    doc.dependencies.lookup.rateLimit = { requestsPerSecond: 5, inputTokensPerMinute: 1_000, outputTokensPerMinute: 1_000 };
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(['dependencies.lookup.rateLimit.inputTokensPerMinute', 'dependencies.lookup.rateLimit.outputTokensPerMinute']);
    expect(err.message).toContain('token limits apply to llm dependencies only');
  });

  it('pacing bounds out of range', () => {
    for (const [field, value] of [['enabled', 'yes'], ['maxInlineWaitMs', -1], ['maxInlineWaitMs', 60_001], ['observedLimitTtlMs', 999], ['interactiveReserve', -0.1], ['interactiveReserve', 1.5]] as const) {
      expect(configError(() => parseConfig({ ...baseDoc(), processor: { pacing: { [field]: value } } })).fields).toEqual([`processor.pacing.${field}`]);
    }
  });

  it('a tool step referencing an unknown dependency', () => {
    const doc = baseDoc();
    doc.workflows.wf.steps[1].tool = 'nope';
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(['workflows.wf.steps.1.tool']);
    expect(err.message).toContain('workflows.wf.steps.1.tool: unknown dependency "nope"');
  });

  it('an llm step whose default dependency "anthropic" does not exist', () => {
    const doc = baseDoc();
    doc.dependencies = { lookup: doc.dependencies.lookup };
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(['workflows.wf.steps.0.dependency']);
    expect(err.message).toContain('unknown dependency "anthropic"');
  });

  it('a tool step referencing an llm dependency', () => {
    const doc = baseDoc();
    doc.workflows.wf.steps[1].tool = 'anthropic';
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(['workflows.wf.steps.1.tool']);
    expect(err.message).toContain('"anthropic" is a llm dependency, not tool');
  });

  it('an llm step referencing a tool dependency', () => {
    const doc = baseDoc();
    doc.workflows.wf.steps[0].dependency = 'lookup';
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(['workflows.wf.steps.0.dependency']);
    expect(err.message).toContain('"lookup" is a tool dependency, not llm');
  });

  /** baseDoc with an agent workflow whose tool `lookup` has an input schema. */
  function agentDoc(step: Record<string, unknown> = {}): Record<string, any> {
    const doc = baseDoc();
    doc.dependencies.lookup.inputSchema = { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] };
    doc.workflows.agent = { steps: [{ id: 'solve', kind: 'agent', system: 'solve it', tools: ['lookup'], ...step }] };
    return doc;
  }

  it('takes an agent step with its bounds defaulted', () => {
    const cfg = parseConfig(agentDoc());
    expect(cfg.workflows.agent!.steps[0]).toEqual({
      id: 'solve',
      kind: 'agent',
      dependency: 'anthropic',
      system: 'solve it',
      tools: ['lookup'],
      bounds: { maxTurns: 8, maxToolCalls: 20, maxTokens: 100_000, maxParallelTools: 4, deadlineShare: 1 },
    });
  });

  it('an agent naming an unknown tool, an llm as a tool, or a tool without an input schema', () => {
    const doc = agentDoc({ tools: ['lookup', 'nope', 'anthropic'] });
    doc.dependencies.other = { ...doc.dependencies.lookup, inputSchema: undefined };
    doc.workflows.agent.steps.push({ id: 'again', kind: 'agent', system: 's', tools: ['other'] });
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(['workflows.agent.steps.0.tools.1', 'workflows.agent.steps.0.tools.2', 'workflows.agent.steps.1.tools.0']);
    expect(err.message).toContain('unknown dependency "nope"');
    expect(err.message).toContain('"anthropic" is a llm dependency, not tool');
    expect(err.message).toContain('tool "other" has no inputSchema');
  });

  it('an agent whose model is a tool, whose tools repeat, or whose bounds are out of range', () => {
    const doc = agentDoc({ dependency: 'lookup', tools: ['lookup', 'lookup'], bounds: { maxTurns: 0, deadlineShare: 1.5, maxParallelTools: 33 } });
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(expect.arrayContaining(['workflows.agent.steps.0.dependency', 'workflows.agent.steps.0.tools', 'workflows.agent.steps.0.bounds.maxTurns', 'workflows.agent.steps.0.bounds.deadlineShare', 'workflows.agent.steps.0.bounds.maxParallelTools']));
    expect(err.message).toContain('must not name a tool twice');
  });

  it('a tool input schema that is not an object schema, or not a JSON Schema at all', () => {
    const doc = agentDoc();
    doc.dependencies.lookup.inputSchema = { type: 'string' };
    expect(configError(() => parseConfig(doc)).message).toContain('dependencies.lookup.inputSchema: must be a JSON Schema with "type": "object"');
    doc.dependencies.lookup.inputSchema = { type: 'object', properties: { id: { type: 'strin' } } };
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(['dependencies.lookup.inputSchema']);
    expect(err.message).toContain('is not a valid JSON Schema');
  });

  it('duplicate step ids', () => {
    const doc = baseDoc();
    doc.workflows.wf.steps.push({ id: 'think', kind: 'tool', tool: 'lookup' });
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(['workflows.wf.steps.2.id']);
    expect(err.message).toContain('duplicate step id "think"');
  });

  it('two tenants with the same key hash', () => {
    const doc = baseDoc();
    doc.tenants.t2.apiKeySha256 = KEY_1;
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(['tenants.t2.apiKeySha256']);
    expect(err.message).toContain('same key as tenant "t1"');
  });

  it('the admin key equal to a tenant key', () => {
    const doc = baseDoc();
    doc.api.adminKeySha256 = KEY_2;
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(['api.adminKeySha256']);
    expect(err.message).toContain('the admin key must differ from every tenant key');
  });

  it('the metrics key equal to the admin key or a tenant key', () => {
    for (const key of [ADMIN, KEY_2]) {
      const doc = baseDoc();
      doc.api.metricsKeySha256 = key;
      const err = configError(() => parseConfig(doc));
      expect(err.fields).toEqual(['api.metricsKeySha256']);
      expect(err.message).toContain('the metrics key must differ from the admin key and every tenant key');
    }
  });

  it('submit input bounds, the admission-row wait and the Redis outage policy out of range', () => {
    const cases: Array<[string, (doc: Record<string, any>) => void]> = [
      ['api.input.maxDepth', (d) => (d.api.input = { maxDepth: 0 })],
      ['api.input.maxDepth', (d) => (d.api.input = { maxDepth: 5_000 })],
      ['api.input.maxBytes', (d) => (d.api.input = { maxBytes: 2 * 1024 * 1024 })],
      ['api.recordAdmissionTimeoutMs', (d) => (d.api.recordAdmissionTimeoutMs = 0)],
      ['admission.redisOutage.policy', (d) => (d.admission = { redisOutage: { policy: 'fail-sometimes' } })],
      ['admission.redisOutage.localBucket.capacity', (d) => (d.admission = { redisOutage: { localBucket: { capacity: 0 } } })],
      ['admission.redisOutage.localBucket.refillPerSec', (d) => (d.admission = { redisOutage: { localBucket: { refillPerSec: -1 } } })],
      ['admission.redisOutage.maxAdmittedPerOutage', (d) => (d.admission = { redisOutage: { maxAdmittedPerOutage: 0 } })],
    ];
    for (const [field, change] of cases) {
      const doc = baseDoc();
      change(doc);
      expect(configError(() => parseConfig(doc)).fields, field).toEqual([field]);
    }
    const doc = baseDoc();
    doc.admission = { redisOutage: { policy: 'fail-open', localBucket: { capacity: 5 } } };
    expect(parseConfig(doc).admission.redisOutage).toEqual({ policy: 'fail-open', localBucket: { capacity: 5, refillPerSec: 2 }, maxAdmittedPerOutage: 500 });
  });

  it('a key hash that is not lowercase hex SHA-256', () => {
    for (const bad of ['z'.repeat(64), KEY_1.toUpperCase(), KEY_1.slice(0, 63), `${KEY_1}0`, 'local-key-a']) {
      const doc = baseDoc();
      doc.tenants.t1.apiKeySha256 = bad;
      const err = configError(() => parseConfig(doc));
      expect(err.fields).toEqual(['tenants.t1.apiKeySha256']);
      expect(err.message).toContain('must be a lowercase hex SHA-256 of the key');
    }
  });

  it('a non-hex admin key hash', () => {
    const doc = baseDoc();
    doc.api.adminKeySha256 = 'not-a-hash';
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(['api.adminKeySha256']);
  });

  it('read bounds out of range, each named by its path', () => {
    const doc = baseDoc();
    doc.tenants.t1.reads = { bucket: { capacity: 0, refillPerSec: -1 }, maxStreams: 0 };
    doc.tenants.t2.reads = { maxStreams: 1_001 };
    const err = configError(() => parseConfig(doc));
    expect(err.fields.sort()).toEqual(['tenants.t1.reads.bucket.capacity', 'tenants.t1.reads.bucket.refillPerSec', 'tenants.t1.reads.maxStreams', 'tenants.t2.reads.maxStreams']);
  });

  it('read bounds given in part keep the defaults for the rest', () => {
    const doc = baseDoc();
    doc.tenants.t1.reads = { bucket: { refillPerSec: 0.5 } };
    expect(parseConfig(doc).tenants.t1!.reads).toEqual({ bucket: { capacity: 200, refillPerSec: 0.5 }, maxStreams: 100 });
  });

  it('more in-sync replicas than copies', () => {
    const doc = baseDoc();
    doc.kafka = { replicationFactor: 2, minInsyncReplicas: 3 };
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(['kafka.minInsyncReplicas']);
    expect(err.message).toContain('kafka.minInsyncReplicas: must not exceed kafka.replicationFactor');
    expect(parseConfig({ ...baseDoc(), kafka: { replicationFactor: 3, minInsyncReplicas: 2 } }).kafka).toMatchObject({ replicationFactor: 3, minInsyncReplicas: 2 });
  });

  it('deadline min greater than max', () => {
    const doc = baseDoc();
    doc.api.deadlineMs = { min: 60_000, max: 10_000 };
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(['api.deadlineMs.min']);
    expect(err.message).toContain('api.deadlineMs.min: must not exceed api.deadlineMs.max');
  });

  it('deadline min equal to max is allowed', () => {
    const doc = baseDoc();
    doc.api.deadlineMs = { min: 10_000, max: 10_000 };
    expect(parseConfig(doc).api.deadlineMs).toMatchObject({ min: 10_000, max: 10_000 });
  });

  it('a call budget whose total is below its connect timeout', () => {
    const doc = baseDoc();
    doc.dependencies.lookup.timeouts = { connectMs: 5000, readMs: 1000, totalMs: 1000 };
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(['dependencies.lookup.timeouts.totalMs']);
  });

  it('a bad tool url and an unknown dependency kind', () => {
    const doc = baseDoc();
    doc.dependencies.lookup.url = 'ftp://x';
    doc.dependencies.other = { kind: 'grpc' };
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(expect.arrayContaining(['dependencies.lookup.url', 'dependencies.other.kind']));
  });

  it('lists every offending field at once, one per line', () => {
    const doc = baseDoc();
    doc.api.port = -1;
    doc.kafka = { brokers: ['no-port'] };
    doc.logLevel = 'loud';
    const err = configError(() => parseConfig(doc, {}, 'my.yaml'));
    expect(err.fields.sort()).toEqual(['api.port', 'kafka.brokers.0', 'logLevel']);
    expect(err.message.startsWith('invalid configuration in my.yaml:\n')).toBe(true);
    expect(err.message.split('\n')).toHaveLength(4);
    expect(err.message).toContain('kafka.brokers.0: must be host:port');
  });

  it('a workflow without steps and an empty tenant map', () => {
    const doc = baseDoc();
    doc.workflows.wf.steps = [];
    doc.tenants = {};
    const err = configError(() => parseConfig(doc));
    expect(err.fields).toEqual(expect.arrayContaining(['workflows.wf.steps', 'tenants']));
  });

  it('a tenant name that is not lowercase', () => {
    const doc = baseDoc();
    doc.tenants.BadName = { apiKeySha256: sha('x') };
    const err = configError(() => parseConfig(doc));
    expect(err.fields.some((f) => f.startsWith('tenants'))).toBe(true);
  });

  it('top-level YAML that is a list', () => {
    const err = configError(() => parseConfig([1, 2], {}, 'list.yaml'));
    expect(err.fields).toEqual(['(root)']);
    expect(err.message).toBe('list.yaml: the top level must be a mapping');
  });

  it('top-level YAML that is a scalar', () => {
    for (const raw of ['just text', 42, true]) {
      const err = configError(() => parseConfig(raw));
      expect(err.fields).toEqual(['(root)']);
    }
  });
});

describe('loadConfig file errors', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-config-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('an unreadable file path', () => {
    const missing = join(dir, 'missing.yaml');
    const err = configError(() => loadConfig({ path: missing, env: {} }));
    expect(err.fields).toEqual(['(file)']);
    expect(err.message).toContain(`cannot read config file ${missing}`);
  });

  it('a directory instead of a file', () => {
    const err = configError(() => loadConfig({ path: dir, env: {} }));
    expect(err.fields).toEqual(['(file)']);
    expect(err.message).toContain('cannot read config file');
  });

  it('invalid YAML', async () => {
    const file = join(dir, 'broken.yaml');
    await writeFile(file, 'tenants:\n  a: [1, 2\n  b: {');
    const err = configError(() => loadConfig({ path: file, env: {} }));
    expect(err.fields).toEqual(['(file)']);
    expect(err.message).toContain(`config file ${file} is not valid YAML`);
  });

  it('a YAML list at the top level', async () => {
    const file = join(dir, 'list.yaml');
    await writeFile(file, '- a\n- b\n');
    const err = configError(() => loadConfig({ path: file, env: {} }));
    expect(err.fields).toEqual(['(root)']);
    expect(err.message).toBe(`${file}: the top level must be a mapping`);
  });

  it('names the file in schema errors', async () => {
    const file = join(dir, 'bad-port.yaml');
    const doc = baseDoc();
    doc.api.port = 'eighty';
    await writeFile(file, JSON.stringify(doc));
    const err = configError(() => loadConfig({ path: file, env: {} }));
    expect(err.message).toContain(`invalid configuration in ${file}`);
    expect(err.fields).toEqual(['api.port']);
  });

  it('an empty file is an empty document with the required fields missing', async () => {
    const file = join(dir, 'empty.yaml');
    await writeFile(file, '');
    const err = configError(() => loadConfig({ path: file, env: {} }));
    expect(err.fields).toEqual(expect.arrayContaining(['api', 'tenants', 'workflows']));
  });
});

describe('token budgets in config', () => {
  it('a tenant budget: burstTokens defaults to tokensPerMinute; no budget when absent', () => {
    const doc = baseDoc();
    doc.tenants.t1.admission = { tokenBudget: { tokensPerMinute: 6_000 } };
    doc.tenants.t2.admission = { tokenBudget: { tokensPerMinute: 6_000, burstTokens: 500 } };
    const cfg = parseConfig(doc);
    expect(cfg.tenants.t1!.admission.tokenBudget).toEqual({ tokensPerMinute: 6_000, burstTokens: 6_000 });
    expect(cfg.tenants.t2!.admission.tokenBudget).toEqual({ tokensPerMinute: 6_000, burstTokens: 500 });
    expect(parseConfig(baseDoc()).tenants.t1!.admission.tokenBudget).toBeUndefined();
  });

  it('a budget that is not positive names its field', () => {
    for (const [tokenBudget, field] of [
      [{ tokensPerMinute: 0 }, 'tenants.t1.admission.tokenBudget.tokensPerMinute'],
      [{}, 'tenants.t1.admission.tokenBudget.tokensPerMinute'],
      [{ tokensPerMinute: 10, burstTokens: -1 }, 'tenants.t1.admission.tokenBudget.burstTokens'],
    ] as const) {
      const doc = baseDoc();
      doc.tenants.t1.admission = { tokenBudget };
      expect(configError(() => parseConfig(doc)).fields).toEqual([field]);
    }
  });

  it('a workflow tokenPrior must be a positive whole number', () => {
    const doc = baseDoc();
    doc.workflows.wf.tokenPrior = 1_500;
    expect(parseConfig(doc).workflows.wf!.tokenPrior).toBe(1_500);
    doc.workflows.wf.tokenPrior = 0.5;
    expect(configError(() => parseConfig(doc)).fields).toEqual(['workflows.wf.tokenPrior']);
  });
});
