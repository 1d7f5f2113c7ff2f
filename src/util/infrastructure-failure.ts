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
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'ETIMEDOUT', 'EHOSTUNREACH', 'EHOSTDOWN', 'ENETUNREACH', 'ENETDOWN', 'EPIPE', 'EAI_AGAIN', 'ENOTFOUND', 'EADDRNOTAVAIL']);

/** ioredis rejects commands with plain Errors carrying these messages when the connection (or, on a cluster, every node) is not usable. */
const REDIS_CONNECTION_MESSAGES = [
  'Command timed out',
  'Connection is closed.',
  "Stream isn't writeable and enableOfflineQueue options is false",
  'Socket timeout.',
  'None of startup nodes is available',
  'Failed to refresh slots cache.',
  "Cluster isn't ready and enableOfflineQueue options is false",
  'Too many Cluster redirections.',
];

/** Server replies that mean "not now" rather than "wrong command" (loading, failover, memory, replication). */
const REDIS_UNAVAILABLE_REPLY = /^(LOADING|BUSY|MASTERDOWN|READONLY|CLUSTERDOWN|TRYAGAIN|OOM|NOREPLICAS|MISCONF)\b/;

/** node-postgres and pg-pool errors, without a code, that mean the connection, not the statement, failed. */
const PG_CONNECTION_MESSAGES = [/^Connection terminated/, /^timeout exceeded when trying to connect$/, /^timeout expired$/, /^Query read timeout$/, /is not queryable$/, /^Cannot use a pool after calling end on the pool$/];

/**
 * SQLSTATE classes whose conditions pass: 08 connection exception, 40 transaction rollback
 * (40001 serialization failure, 40P01 deadlock), 53 insufficient resources (disk full, too many
 * connections), 57 operator intervention (57014 statement timeout, 57P01 admin shutdown, 57P03
 * cannot connect now), 58 system error (I/O); and, outside them, a lock or idle-session timeout.
 */
const PG_UNAVAILABLE_CLASSES = new Set(['08', '40', '53', '57', '58']);
const PG_UNAVAILABLE_STATES = new Set(['55P03', '25P03']);
const SQLSTATE = /^[0-9A-Z]{5}$/;

/** The SQLSTATE of an error Postgres answered with, or undefined when the error did not come from the server. */
export function sqlState(err: unknown): string | undefined {
  if (err === null || typeof err !== 'object') return undefined;
  const { code, severity } = err as ErrorLike;
  // node-postgres marks server errors with a severity; Node's EPIPE would pass for a SQLSTATE too.
  return typeof code === 'string' && SQLSTATE.test(code) && typeof severity === 'string' ? code : undefined;
}

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

  const state = sqlState(err);
  if (state !== undefined) return PG_UNAVAILABLE_CLASSES.has(state.slice(0, 2)) || PG_UNAVAILABLE_STATES.has(state) ? { dependency: 'postgres', reason: `sqlstate_${state.slice(0, 2)}` } : undefined;
  if (PG_CONNECTION_MESSAGES.some((m) => m.test(message))) return { dependency: 'postgres', reason: 'connection' };

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
