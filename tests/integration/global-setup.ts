import type { TestProject } from 'vitest/node';
import { infraDown, infraUp, type InfraEndpoints } from '../../src/dev/infra/local-infra.js';
import { createLogger } from '../../src/obs/logger.js';
import { startThrowawayRedisCluster } from '../support/throwaway-redis-cluster.js';

declare module 'vitest' {
  export interface ProvidedContext {
    infra: Pick<InfraEndpoints, 'kafkaBrokers' | 'redisUrl' | 'databaseUrl'>;
    /** The nodes (`host:port`) of a throwaway three-master Redis Cluster, for the suites that run on both backends. */
    redisCluster: string[];
  }
}

const stateDir = process.env.SLUICE_STATE_DIR ?? '.sluice';

/**
 * Brings up real Kafka, Redis and Postgres (or reuses running ones, or those named by
 * KAFKA_BROKERS / REDIS_URL / DATABASE_URL) once for all integration files, and afterwards stops
 * only what it started itself. A throwaway Redis Cluster runs beside them for the whole run, so
 * the suites parameterised over REDIS_BACKENDS share one instead of each starting its own.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const logger = createLogger(process.env.SLUICE_TEST_LOG_LEVEL ?? 'warn');
  const endpoints = await infraUp({ stateDir, logger });
  project.provide('infra', { kafkaBrokers: endpoints.kafkaBrokers, redisUrl: endpoints.redisUrl, databaseUrl: endpoints.databaseUrl });
  const cluster = await startThrowawayRedisCluster();
  project.provide('redisCluster', cluster.nodes);
  return async () => {
    await cluster.close();
    const services = (Object.keys(endpoints.started) as (keyof typeof endpoints.started)[]).filter((s) => endpoints.started[s]);
    if (services.length > 0) await infraDown({ stateDir, logger, services });
  };
}
