import { Kafka, Partitioners, logLevel, type LogEntry, type Producer } from 'kafkajs';
import type { Logger } from '../obs/logger.js';
import type { SluiceConfig } from '../config/schema.js';

const levels: Record<number, 'error' | 'warn' | 'info' | 'debug'> = {
  [logLevel.ERROR]: 'error',
  [logLevel.WARN]: 'warn',
  [logLevel.INFO]: 'info',
  [logLevel.DEBUG]: 'debug',
};

/** kafkajs logs through pino so every line is structured JSON like the rest of Sluice. */
export function createKafka(cfg: SluiceConfig['kafka'], logger: Logger, clientSuffix: string): Kafka {
  const log = logger.child({ component: 'kafkajs' });
  return new Kafka({
    clientId: `${cfg.clientId}-${clientSuffix}`,
    brokers: cfg.brokers,
    connectionTimeout: 3_000,
    requestTimeout: 30_000,
    retry: { initialRetryTime: 100, retries: 8, maxRetryTime: 5_000 },
    logLevel: logLevel.WARN,
    logCreator:
      () =>
      ({ level, log: entry }: LogEntry) => {
        const { message, ...rest } = entry;
        log[levels[level] ?? 'info']({ namespace: entry.namespace, ...rest }, message);
      },
  });
}

/**
 * The producer every writer of Sluice's events uses: idempotent, so a retried send is not a
 * duplicate. Idempotence needs unbounded retries to keep its guarantee; callers bound each send by
 * their own timeout instead. Tenant keys map to partitions as the Java client maps them.
 */
export function createIdempotentProducer(kafka: Kafka): Producer {
  return kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
    createPartitioner: Partitioners.DefaultPartitioner,
    retry: { retries: Number.MAX_SAFE_INTEGER, initialRetryTime: 100, maxRetryTime: 2_000 },
  });
}
