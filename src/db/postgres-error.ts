import { infrastructureFailure, sqlState } from '../util/infrastructure-failure.js';

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

/** SQLSTATE classes of a refused value: data exception, integrity constraint violation, program limit exceeded. */
const DATA_CLASSES = new Set(['22', '23', '54']);

/** Pure: the kind of a failed write, from the error alone. */
export function classifyWriteFailure(err: unknown): WriteFailureKind {
  // The same "retry later" as everywhere else: Postgres, the network or our own timeout.
  if (infrastructureFailure(err)) return 'transient';
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
