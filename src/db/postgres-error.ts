/**
 * What a failed Postgres write means for the sink that tried it:
 * - `transient`: Postgres (or the way to it) is unavailable or busy; the same write will succeed
 *   later, so retry it as it is.
 * - `data`: Postgres refused a value (SQLSTATE class 22 data exception, 23 integrity constraint
 *   violation, 54 program limit exceeded, such as JSON nested too deep); retrying can never help,
 *   and the fault is in the rows written, not in the statement or the schema.
 * - `permanent`: retrying will not help either, but the fault may lie in the statement, the schema
 *   or the server (42P01 undefined table after a bad deploy, 42501 permission denied, XX000, an
 *   error the driver raised while preparing a value): it may hold for every row alike.
 */
export type WriteFailureKind = 'transient' | 'data' | 'permanent';

/**
 * SQLSTATE classes whose conditions pass: 08 connection exception, 40 transaction rollback
 * (40001 serialization failure, 40P01 deadlock), 53 insufficient resources (disk full, too many
 * connections), 57 operator intervention (57014 statement timeout, 57P01 admin shutdown, 57P03
 * cannot connect now), 58 system error (I/O).
 */
const TRANSIENT_CLASSES = new Set(['08', '40', '53', '57', '58']);
/** Single conditions outside those classes that pass: a lock or an idle-session timeout. */
const TRANSIENT_STATES = new Set(['55P03', '25P03']);
const DATA_CLASSES = new Set(['22', '23', '54']);

/** Socket and DNS failures Node reports (`err.code`): the network or the server is away. */
const TRANSIENT_NODE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EADDRNOTAVAIL',
]);

/** Failures node-postgres and its pool raise without a code when a connection is lost or cannot be had. */
const TRANSIENT_DRIVER_MESSAGES = [
  /^Connection terminated/,
  /^timeout exceeded when trying to connect$/,
  /^timeout expired$/,
  /^Query read timeout$/,
  /is not queryable$/,
  /^Cannot use a pool after calling end on the pool$/,
];

const SQLSTATE = /^[0-9A-Z]{5}$/;
/** How far down `cause` and AggregateError chains to look; a cycle cannot hold the sink. */
const MAX_CAUSE_DEPTH = 5;

function fieldOf(err: unknown, field: string): unknown {
  return err !== null && typeof err === 'object' ? (err as Record<string, unknown>)[field] : undefined;
}

/** The SQLSTATE of an error Postgres answered with, or undefined when the error did not come from the server. */
export function sqlState(err: unknown): string | undefined {
  const code = fieldOf(err, 'code');
  // node-postgres marks server errors with a severity; Node's EPIPE would pass for a SQLSTATE too.
  return typeof code === 'string' && SQLSTATE.test(code) && typeof fieldOf(err, 'severity') === 'string' ? code : undefined;
}

function isTransient(err: unknown, depth: number): boolean {
  if (depth > MAX_CAUSE_DEPTH) return false;
  const state = sqlState(err);
  if (state !== undefined) return TRANSIENT_CLASSES.has(state.slice(0, 2)) || TRANSIENT_STATES.has(state);
  const code = fieldOf(err, 'code');
  if (typeof code === 'string' && TRANSIENT_NODE_CODES.has(code)) return true;
  if (fieldOf(err, 'name') === 'TimeoutError') return true;
  const message = fieldOf(err, 'message');
  if (typeof message === 'string' && TRANSIENT_DRIVER_MESSAGES.some((m) => m.test(message))) return true;
  const inner = fieldOf(err, 'errors');
  if (Array.isArray(inner) && inner.some((e) => isTransient(e, depth + 1))) return true;
  const cause = fieldOf(err, 'cause');
  return cause !== undefined && isTransient(cause, depth + 1);
}

/** Pure: the kind of a failed write, from the error alone. */
export function classifyWriteFailure(err: unknown): WriteFailureKind {
  if (isTransient(err, 0)) return 'transient';
  const state = sqlState(err);
  return state !== undefined && DATA_CLASSES.has(state.slice(0, 2)) ? 'data' : 'permanent';
}

/** A write Postgres refused for good, as the DLQ records it: the SQLSTATE (when there is one) and the message. */
export class PostgresRejectedError extends Error {
  override readonly name = 'PostgresRejectedError';
  readonly sqlState: string | undefined;

  constructor(cause: unknown) {
    const state = sqlState(cause);
    const message = cause instanceof Error ? cause.message : String(cause);
    super(state === undefined ? `no SQLSTATE: ${message}` : `SQLSTATE ${state}: ${message}`, { cause });
    this.sqlState = state;
  }
}
