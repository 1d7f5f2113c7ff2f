import { mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { SluiceConfig } from '../../config/schema.js';
import type { Logger } from '../../obs/logger.js';
import { APT_INSTALL_BOUND_MS } from './apt.js';
import { brokerList, clusterNodes, ensureKafkaCluster, probeKafka, runningNodes, stopKafka } from './kafka-broker.js';
import { withLock } from './lock.js';
import { type OwnershipRecord, readOwnership, SERVICES, type ServiceName, writeOwnership } from './ownership.js';
import {
  DEFAULT_DATABASE_URL,
  ensurePostgres,
  localClusterVersion,
  postmasterPid,
  probePostgres,
  stopPostgres,
} from './postgres.js';
import { DEFAULT_REDIS_URL, ensureRedis, redisServerPid, stopRedis } from './redis.js';
import { redactUrl, urlPort } from '../../util/url.js';

/**
 * Local infrastructure for development and tests: Kafka (one broker or a cluster), Redis and PostgreSQL, started
 * when absent and stopped only by the state dir that started them. KAFKA_BROKERS, REDIS_URL and
 * DATABASE_URL point at existing services instead; those are checked but never started.
 */

export type { ServiceName } from './ownership.js';

export interface InfraOptions {
  /** Holds the lock, the ownership record (infra.json), pid files, broker data and logs. */
  stateDir: string;
  logger: Logger;
  kafkaPort?: number;
  controllerPort?: number;
  /**
   * Kafka brokers to run (each also a controller); further nodes take the ports two above the
   * previous one's. Defaults to the size of the cluster this state dir last started, else 1.
   */
  brokers?: number;
  /** Where KAFKA_BROKERS, REDIS_URL and DATABASE_URL are read from; defaults to process.env. */
  env?: NodeJS.ProcessEnv;
}

export interface InfraDownOptions extends InfraOptions {
  /** Stop only these (still only if owned); default all. */
  services?: ServiceName[];
}

export interface InfraEndpoints {
  kafkaBrokers: string[];
  redisUrl: string;
  databaseUrl: string;
  /** What this call started (as opposed to found running). */
  started: { kafka: boolean; redis: boolean; postgres: boolean };
}

export interface ServiceStatus {
  running: boolean;
  /** Started by `infra up` from this state dir: `infra down` stops it. */
  owned: boolean;
  /** The endpoint came from KAFKA_BROKERS / REDIS_URL / DATABASE_URL. */
  fromEnv: boolean;
  /** Brokers or URL, password redacted. */
  endpoint: string;
  pid?: number;
  ports: number[];
  /** Kafka only: each node of our cluster, and whether it runs. */
  nodes?: { nodeId: number; port: number; controllerPort: number; pid?: number }[];
}

export interface InfraStatus {
  stateDir: string;
  kafka: ServiceStatus;
  redis: ServiceStatus;
  postgres: ServiceStatus;
}

const DEFAULT_KAFKA_PORT = 9092;
const DEFAULT_CONTROLLER_PORT = 9093;
// Must outlast the longest `up` holding the lock: two package installs one after another (the
// jar fetch runs alongside them), plus starting a broker.
const LOCK_WAIT_MS = 2 * APT_INSTALL_BOUND_MS + 5 * 60_000;

const lockFile = (stateDir: string): string => join(stateDir, 'infra.lock');
const now = (): string => new Date().toISOString();

export const splitBrokers = (list: string): string[] =>
  list.split(',').map((b) => b.trim()).filter(Boolean);

interface Resolved {
  stateDir: string;
  log: Logger;
  env: NodeJS.ProcessEnv;
  kafkaPort: number;
  controllerPort: number;
  brokers: number;
}

function resolveOptions(opts: InfraOptions, record: OwnershipRecord = {}): Resolved {
  return {
    stateDir: resolve(opts.stateDir),
    // Callers such as the CLI may have bound the component already; pino would repeat the key.
    log: 'component' in opts.logger.bindings() ? opts.logger : opts.logger.child({ component: 'infra' }),
    env: opts.env ?? process.env,
    kafkaPort: opts.kafkaPort ?? record.kafka?.port ?? DEFAULT_KAFKA_PORT,
    controllerPort: opts.controllerPort ?? record.kafka?.controllerPort ?? DEFAULT_CONTROLLER_PORT,
    brokers: opts.brokers ?? record.kafka?.nodes?.length ?? 1,
  };
}

async function upKafka(o: Resolved, record: OwnershipRecord): Promise<{ brokers: string[]; started: boolean }> {
  if (o.env.KAFKA_BROKERS) {
    const brokers = splitBrokers(o.env.KAFKA_BROKERS);
    if (!(await probeKafka(brokers, 10_000))) {
      throw new Error(`KAFKA_BROKERS=${brokers.join(',')}: no Kafka broker there answered within 10 s`);
    }
    return { brokers, started: false };
  }
  const cluster = await ensureKafkaCluster({ stateDir: o.stateDir, nodes: clusterNodes(o.brokers, o.kafkaPort, o.controllerPort), logger: o.log });
  if (!cluster.owned) delete record.kafka;
  else if (cluster.started || record.kafka?.nodes?.map((n) => n.pid).join() !== cluster.nodes.map((n) => n.pid).join()) {
    record.kafka = { port: o.kafkaPort, controllerPort: o.controllerPort, nodes: cluster.nodes, startedAt: now() };
  }
  return { brokers: cluster.brokers, started: cluster.started };
}

async function upRedis(o: Resolved, record: OwnershipRecord): Promise<{ url: string; started: boolean }> {
  const url = o.env.REDIS_URL || DEFAULT_REDIS_URL;
  const redis = await ensureRedis({ stateDir: o.stateDir, url, mayStart: !o.env.REDIS_URL, logger: o.log });
  if (redis.started && redis.pid !== undefined) record.redis = { pid: redis.pid, url, startedAt: now() };
  // A different server on the address means ours died and someone else's took its place.
  else if (record.redis && record.redis.pid !== redis.pid) delete record.redis;
  return { url, started: redis.started };
}

async function upPostgres(o: Resolved, record: OwnershipRecord): Promise<{ url: string; started: boolean }> {
  const url = o.env.DATABASE_URL || DEFAULT_DATABASE_URL;
  const pg = await ensurePostgres({ url, mayStart: !o.env.DATABASE_URL, logger: o.log });
  if (pg.started && pg.pid !== undefined && pg.version !== undefined) {
    record.postgres = { pid: pg.pid, version: pg.version, cluster: 'main', startedAt: now() };
  } else if (record.postgres && record.postgres.pid !== pg.pid) delete record.postgres;
  return { url, started: pg.started };
}

/**
 * Makes Kafka, Redis and PostgreSQL available and returns where they are. Reuses whatever already
 * runs; concurrent calls (also from other processes) on one state dir are serialised by a lock.
 */
export async function infraUp(opts: InfraOptions): Promise<InfraEndpoints> {
  await mkdir(resolve(opts.stateDir), { recursive: true });
  return withLock(lockFile(resolve(opts.stateDir)), { timeoutMs: LOCK_WAIT_MS, logger: opts.logger }, async () => {
    const record = await readOwnership(resolve(opts.stateDir));
    // The record, read under the lock, gives the cluster size and ports last used.
    const o = resolveOptions(opts, record);
    // Kafka takes seconds to start; the stores are checked meanwhile, one after the other because
    // both may need apt-get, which cannot run twice at once.
    const [kafka, stores] = await Promise.allSettled([
      upKafka(o, record),
      (async () => ({ redis: await upRedis(o, record), postgres: await upPostgres(o, record) }))(),
    ]);
    // Record what did start even if something else failed, so that `down` can clean it up.
    await writeOwnership(o.stateDir, record);
    if (kafka.status === 'rejected') throw kafka.reason;
    if (stores.status === 'rejected') throw stores.reason;
    const endpoints: InfraEndpoints = {
      kafkaBrokers: kafka.value.brokers,
      redisUrl: stores.value.redis.url,
      databaseUrl: stores.value.postgres.url,
      started: { kafka: kafka.value.started, redis: stores.value.redis.started, postgres: stores.value.postgres.started },
    };
    o.log.info(
      { kafka: endpoints.kafkaBrokers, redis: redactUrl(endpoints.redisUrl), postgres: redactUrl(endpoints.databaseUrl), started: endpoints.started },
      'infrastructure up',
    );
    return endpoints;
  });
}

async function downService(service: ServiceName, o: Resolved, record: OwnershipRecord): Promise<boolean> {
  switch (service) {
    case 'kafka':
      // The pid file, not the record, is authoritative: it also covers a crash before the record was written.
      return stopKafka(o.stateDir, o.log);
    case 'redis':
      return record.redis ? stopRedis(o.stateDir, record.redis.pid, o.log) : false;
    case 'postgres':
      return record.postgres ? stopPostgres(record.postgres, o.log) : false;
  }
}

/** Stops what `infraUp` started from this state dir; anything it found running is left alone. */
export async function infraDown(opts: InfraDownOptions): Promise<{ stopped: ServiceName[] }> {
  const o = resolveOptions(opts);
  await mkdir(o.stateDir, { recursive: true });
  return withLock(lockFile(o.stateDir), { timeoutMs: LOCK_WAIT_MS, logger: o.log }, async () => {
    const record = await readOwnership(o.stateDir);
    const stopped: ServiceName[] = [];
    try {
      for (const service of opts.services ?? SERVICES) {
        if (await downService(service, o, record)) stopped.push(service);
        delete record[service];
      }
    } finally {
      await writeOwnership(o.stateDir, record);
    }
    o.log.info({ stopped }, 'infrastructure down');
    return { stopped };
  });
}

async function kafkaStatus(o: Resolved): Promise<ServiceStatus> {
  const fromEnv = Boolean(o.env.KAFKA_BROKERS);
  if (fromEnv) {
    const brokers = splitBrokers(o.env.KAFKA_BROKERS ?? '');
    return { running: await probeKafka(brokers, 3_000), owned: false, fromEnv, endpoint: brokers.join(','), ports: [] };
  }
  const layout = clusterNodes(o.brokers, o.kafkaPort, o.controllerPort);
  const running = (await runningNodes(o.stateDir)).filter((n) => n.clusterSize === layout.length);
  const nodes = layout.map((n) => ({ ...n, pid: running.find((r) => r.nodeId === n.nodeId)?.pid }));
  return {
    running: await probeKafka(brokerList(layout), 3_000),
    owned: running.length > 0,
    fromEnv,
    endpoint: brokerList(layout).join(','),
    pid: nodes[0]?.pid,
    ports: layout.flatMap((n) => [n.port, n.controllerPort]),
    nodes,
  };
}

async function redisStatus(o: Resolved, record: OwnershipRecord): Promise<ServiceStatus> {
  const url = o.env.REDIS_URL || DEFAULT_REDIS_URL;
  const pid = await redisServerPid(url);
  return {
    running: pid !== undefined,
    owned: pid != null && record.redis?.pid === pid,
    fromEnv: Boolean(o.env.REDIS_URL),
    endpoint: redactUrl(url),
    pid: pid ?? undefined,
    ports: [urlPort(url, 6379)],
  };
}

async function postgresStatus(o: Resolved, record: OwnershipRecord): Promise<ServiceStatus> {
  const url = o.env.DATABASE_URL || DEFAULT_DATABASE_URL;
  const fromEnv = Boolean(o.env.DATABASE_URL);
  const probe = await probePostgres(url);
  const version = fromEnv ? undefined : await localClusterVersion();
  const pid = version === undefined ? undefined : await postmasterPid(version);
  return {
    running: probe.state !== 'unreachable',
    owned: pid !== undefined && record.postgres?.pid === pid,
    fromEnv,
    endpoint: redactUrl(url),
    pid,
    ports: [urlPort(url, 5432)],
  };
}

/** What runs, who owns it, pids and ports. Read-only and lock-free, so it never waits for `up`. */
export async function infraStatus(opts: InfraOptions): Promise<InfraStatus> {
  const record = await readOwnership(resolve(opts.stateDir));
  const o = resolveOptions(opts, record);
  const [kafka, redis, postgres] = await Promise.all([kafkaStatus(o), redisStatus(o, record), postgresStatus(o, record)]);
  return { stateDir: o.stateDir, kafka, redis, postgres };
}

/** Points the config at the local services `infra up` found or started, when it asks for them. */
export async function withLocalInfra(config: SluiceConfig, logger: Logger): Promise<SluiceConfig> {
  if (!config.localInfra) return config;
  const endpoints = await infraUp({ stateDir: config.stateDir, logger: logger.child({ component: 'infra' }) });
  return {
    ...config,
    kafka: { ...config.kafka, brokers: endpoints.kafkaBrokers },
    redis: { ...config.redis, url: endpoints.redisUrl },
    postgres: { ...config.postgres, url: endpoints.databaseUrl },
  };
}
