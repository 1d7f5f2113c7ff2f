import { Kafka, Partitioners, logLevel, type ICustomPartitioner, type LogEntry, type Producer } from 'kafkajs';
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
 * Broker answers after which an idempotent producer's sequence numbers no longer match what the
 * partition's leader holds, which kafkajs does not retry: every later send to that partition gets
 * the same answer, for as long as the producer lives. Seen after a partition leader was killed
 * (the broker-kill drill: OUT_OF_ORDER_SEQUENCE_NUMBER from the new leader for 73 s, to the end).
 * Only a new producer id, whose sequences start again at 0, recovers.
 */
const DESYNCHRONIZED = new Set(['OUT_OF_ORDER_SEQUENCE_NUMBER', 'UNKNOWN_PRODUCER_ID', 'INVALID_PRODUCER_EPOCH']);

/** Whether a failed send (kafkajs wraps the broker's answer in `cause`) calls for a new producer id. */
export function needsNewProducerId(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (DESYNCHRONIZED.has(String((e as { type?: unknown }).type))) return true;
  }
  return false;
}

/**
 * The producer every writer of Sluice's events uses: idempotent, so a retried send is not a
 * duplicate. Idempotence needs unbounded retries to keep its guarantee; callers bound each send by
 * their own timeout instead. Tenant keys map to partitions as the Java client maps them.
 */
export function createIdempotentProducer(kafka: Kafka, createPartitioner: ICustomPartitioner = Partitioners.DefaultPartitioner): Producer {
  return kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
    createPartitioner,
    retry: { retries: Number.MAX_SAFE_INTEGER, initialRetryTime: 100, maxRetryTime: 2_000 },
  });
}

/**
 * kafkajs's default partitioner (murmur2 of the key, as the Java client), remembering the
 * partition it chose for each message object it was handed: what EventProducer checks a send's
 * answer against. Shared by every producer made with `create`, so a replaced producer keeps it.
 */
export class RecordingPartitioner {
  private readonly chosen = new WeakMap<object, number>();

  readonly create: ICustomPartitioner = () => {
    const choose = Partitioners.DefaultPartitioner();
    return (args) => {
      const partition = choose(args);
      this.chosen.set(args.message, partition);
      return partition;
    };
  };

  /** The partition last chosen for this message object; undefined if it was never partitioned. */
  partitionOf(message: object): number | undefined {
    return this.chosen.get(message);
  }
}
