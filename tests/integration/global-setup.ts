import type { TestProject } from 'vitest/node';
import { infraDown, infraUp, type InfraEndpoints } from '../../src/dev/infra/local-infra.js';
import { createLogger } from '../../src/obs/logger.js';

declare module 'vitest' {
  export interface ProvidedContext {
    infra: Pick<InfraEndpoints, 'kafkaBrokers' | 'redisUrl' | 'databaseUrl'>;
  }
}

const stateDir = process.env.SLUICE_STATE_DIR ?? '.sluice';

/**
 * Brings up real Kafka, Redis and Postgres (or reuses running ones, or those named by
 * KAFKA_BROKERS / REDIS_URL / DATABASE_URL) once for all integration files, and afterwards stops
 * only what it started itself.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const logger = createLogger(process.env.SLUICE_TEST_LOG_LEVEL ?? 'warn');
  const endpoints = await infraUp({ stateDir, logger });
  project.provide('infra', { kafkaBrokers: endpoints.kafkaBrokers, redisUrl: endpoints.redisUrl, databaseUrl: endpoints.databaseUrl });
  return async () => {
    const services = (Object.keys(endpoints.started) as (keyof typeof endpoints.started)[]).filter((s) => endpoints.started[s]);
    if (services.length > 0) await infraDown({ stateDir, logger, services });
  };
}
