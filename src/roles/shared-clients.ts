import { join, resolve } from 'node:path';
import type { Kafka } from 'kafkajs';
import type pg from 'pg';
import { LuaScripts } from '../redis/scripts.js';
import { createRedisClient, type RedisClient } from '../redis/client.js';
import { redisKeys, type RedisKeys } from '../redis/keys.js';
import type { SluiceConfig } from '../config/schema.js';
import { EventCodec } from '../events/codec.js';
import { FileSchemaRegistry } from '../events/file-schema-registry.js';
import { HttpSchemaRegistry } from '../events/http-schema-registry.js';
import { createKafka } from '../kafka/client.js';
import { KafkaProbe } from '../kafka/kafka-probe.js';
import { ensureTopics, topicNames } from '../kafka/topics.js';
import { createPool } from '../db/pool.js';
import { migrate } from '../db/migrate.js';
import { EventProducer } from '../producers/event-producer.js';
import type { Logger } from '../obs/logger.js';
import { readinessPlan, type Dependency, type ReadinessCheck } from '../api/routes/health.js';

/**
 * Connections shared by the roles of one process, created on first use so a process runs only
 * what its roles need, and closed once in reverse order.
 */
export class SharedClients {
  private kafkaClient?: Kafka;
  private producerP?: Promise<EventProducer>;
  private poolP?: Promise<pg.Pool>;
  private redisClient?: RedisClient;
  private scriptsInstance?: LuaScripts;
  private codecInstance?: EventCodec;
  private topicsP?: Promise<void>;
  /** Readiness asks Kafka over one long-lived admin client, created on the first check. */
  private readonly kafkaProbe = new KafkaProbe(() => this.kafka.admin());

  constructor(
    private readonly config: SluiceConfig,
    private readonly logger: Logger,
  ) {}

  get kafka(): Kafka {
    this.kafkaClient ??= createKafka(this.config.kafka, this.logger, this.config.instanceId ?? String(process.pid));
    return this.kafkaClient;
  }

  get codec(): EventCodec {
    const { schemaRegistry } = this.config;
    this.codecInstance ??= new EventCodec(
      schemaRegistry.url ? new HttpSchemaRegistry(schemaRegistry.url, { timeoutMs: schemaRegistry.timeoutMs }) : new FileSchemaRegistry(resolve(schemaRegistry.dir ?? join(this.config.stateDir, 'schema-registry'))),
    );
    return this.codecInstance;
  }

  /** Topics are created by the app at start-up, once per process. */
  ensureTopics(): Promise<void> {
    this.topicsP ??= (async () => {
      const admin = this.kafka.admin();
      await admin.connect();
      try {
        const { created, mismatched } = await ensureTopics(admin, this.config.kafka, this.config.namespace);
        if (created.length > 0) this.logger.info({ created }, 'created topics');
        for (const m of mismatched) this.logger.warn(m);
      } finally {
        await admin.disconnect();
      }
    })();
    return this.topicsP;
  }

  producer(): Promise<EventProducer> {
    this.producerP ??= this.ensureTopics().then(() => EventProducer.connect(this.kafka, this.codec, topicNames(this.config.namespace), { maxBatchBytes: this.config.kafka.maxBatchBytes, logger: this.logger }));
    return this.producerP;
  }

  pool(): Promise<pg.Pool> {
    this.poolP ??= (async () => {
      const pool = createPool(this.config.postgres, 'sluice');
      pool.on('error', (err) => this.logger.warn({ err }, 'idle Postgres connection failed'));
      const applied = await migrate(pool);
      if (applied.length > 0) this.logger.info({ applied }, 'applied database migrations');
      return pool;
    })();
    return this.poolP;
  }

  get redis(): RedisClient {
    this.redisClient ??= createRedisClient(this.config.redis, { lazyConnect: true, connectTimeout: 2_000, maxRetriesPerRequest: 1, commandTimeout: 2_000 });
    return this.redisClient;
  }

  /** The Lua scripts registered once on the shared client (called by SHA afterwards). */
  get scripts(): LuaScripts {
    this.scriptsInstance ??= new LuaScripts(this.redis);
    return this.scriptsInstance;
  }

  get keys(): RedisKeys {
    return redisKeys(this.config.namespace);
  }

  /** The dependencies this process's roles need, each with what its failing means (`readinessPlan`). */
  readinessChecks(): ReadinessCheck[] {
    const checks: Record<Dependency, () => Promise<void>> = {
      kafka: () => this.kafkaProbe.check(),
      redis: async () => {
        if (this.redis.status === 'wait') await this.redis.connect();
        await this.redis.ping();
      },
      postgres: async () => void (await (await this.pool()).query('SELECT 1')),
    };
    return readinessPlan(this.config.roles, this.config.admission.redisOutage.policy).map((p) => ({ ...p, check: checks[p.name] }));
  }

  async close(): Promise<void> {
    const closing: Promise<unknown>[] = [];
    if (this.producerP) closing.push(this.producerP.then((p) => p.close()));
    if (this.poolP) closing.push(this.poolP.then((p) => p.end()));
    closing.push(this.kafkaProbe.close());
    if (this.redisClient) this.redisClient.disconnect();
    await Promise.allSettled(closing);
  }
}
