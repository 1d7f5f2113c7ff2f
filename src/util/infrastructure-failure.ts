/**
 * Tells an infrastructure failure (a dependency unreachable, refusing work or too slow) from a bug,
 * from the error alone. An infrastructure failure is the caller's cue to answer "retry later"
 * (503 with Retry-After) instead of 500; anything not recognised here is treated as a bug.
 */

export type FailedDependency = 'redis' | 'postgres' | 'kafka' | 'network' | 'timeout';

export interface InfrastructureFailure {
  dependency: FailedDependency;
  /** A short, bounded description for logs and labels (never the error text). */
  reason: string;
}

/** Socket errors of Node's net/dns layer: the peer is not there or went away. */
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'ETIMEDOUT', 'EHOSTUNREACH', 'EHOSTDOWN', 'ENETUNREACH', 'ENETDOWN', 'EPIPE', 'EAI_AGAIN', 'ENOTFOUND']);

/** ioredis rejects commands with plain Errors carrying these messages when the connection is not usable. */
const REDIS_CONNECTION_MESSAGES = ['Command timed out', 'Connection is closed.', "Stream isn't writeable and enableOfflineQueue options is false", 'Socket timeout.'];

/** Server replies that mean "not now" rather than "wrong command" (loading, failover, memory, replication). */
const REDIS_UNAVAILABLE_REPLY = /^(LOADING|BUSY|MASTERDOWN|READONLY|CLUSTERDOWN|TRYAGAIN|OOM|NOREPLICAS|MISCONF)\b/;

/** node-postgres client errors that mean the connection, not the statement, failed. */
const PG_CONNECTION_MESSAGES = ['Connection terminated', 'timeout exceeded when trying to connect', 'Query read timeout', 'Client has encountered a connection error and is not queryable'];

/**
 * SQLSTATE classes of an unavailable server: 08 connection exception, 53 insufficient resources,
 * 57P operator intervention (shutdown, cannot connect now), 58 system error; and 57014, a
 * statement cancelled by its timeout.
 */
const PG_UNAVAILABLE_SQLSTATE = /^(08|53|57P|58)|^57014$/;

/** kafkajs errors that mean the cluster did not answer, even when kafkajs no longer retries them. */
const KAFKA_UNAVAILABLE_NAMES = new Set(['KafkaJSNumberOfRetriesExceeded', 'KafkaJSTimeout', 'KafkaJSLockTimeout', 'KafkaJSGroupCoordinatorNotFound']);

/** Our own producer's refusals when Kafka does not keep up. */
const PRODUCER_UNAVAILABLE_NAMES = new Set(['ProduceTimeoutError', 'ProduceQueueFullError']);

/** Causes followed (`cause`, AggregateError's `errors`) before giving up: errors may be cyclic. */
const MAX_ERRORS_VISITED = 16;

interface ErrorLike {
  name?: unknown;
  message?: unknown;
  code?: unknown;
  severity?: unknown;
  retriable?: unknown;
  cause?: unknown;
  errors?: unknown;
}

function classifyOne(err: ErrorLike): InfrastructureFailure | undefined {
  const name = typeof err.name === 'string' ? err.name : '';
  const message = typeof err.message === 'string' ? err.message : '';
  const code = typeof err.code === 'string' ? err.code : '';

  if (name === 'MaxRetriesPerRequestError') return { dependency: 'redis', reason: 'max_retries' };
  if (name === 'ReplyError' && REDIS_UNAVAILABLE_REPLY.test(message)) return { dependency: 'redis', reason: 'server_unavailable' };
  if (REDIS_CONNECTION_MESSAGES.some((m) => message.startsWith(m))) return { dependency: 'redis', reason: message.startsWith('Command timed out') ? 'timeout' : 'connection' };

  // A server-side Postgres error carries a severity and a five-character SQLSTATE.
  if (typeof err.severity === 'string' && /^[0-9A-Z]{5}$/.test(code)) {
    return PG_UNAVAILABLE_SQLSTATE.test(code) ? { dependency: 'postgres', reason: `sqlstate_${code.slice(0, 2)}` } : undefined;
  }
  if (PG_CONNECTION_MESSAGES.some((m) => message.startsWith(m))) return { dependency: 'postgres', reason: 'connection' };

  if (name.startsWith('KafkaJS') && (err.retriable === true || KAFKA_UNAVAILABLE_NAMES.has(name))) return { dependency: 'kafka', reason: 'unavailable' };
  if (PRODUCER_UNAVAILABLE_NAMES.has(name)) return { dependency: 'kafka', reason: 'not_acknowledged' };

  if (NETWORK_CODES.has(code)) return { dependency: 'network', reason: code.toLowerCase() };
  if (name === 'TimeoutError') return { dependency: 'timeout', reason: 'timeout' };
  return undefined;
}

/** The infrastructure failure behind `err` (itself or one of its causes), or undefined for a bug. */
export function infrastructureFailure(err: unknown): InfrastructureFailure | undefined {
  const pending: unknown[] = [err];
  const seen = new Set<unknown>();
  while (pending.length > 0 && seen.size < MAX_ERRORS_VISITED) {
    const next = pending.shift();
    if (next === null || typeof next !== 'object' || seen.has(next)) continue;
    seen.add(next);
    const e = next as ErrorLike;
    const found = classifyOne(e);
    if (found) return found;
    pending.push(e.cause);
    if (Array.isArray(e.errors)) pending.push(...e.errors.slice(0, MAX_ERRORS_VISITED));
  }
  return undefined;
}
