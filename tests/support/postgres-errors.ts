import pg from 'pg';

/** An error as node-postgres builds it from the server's ErrorResponse. */
export function serverError(code: string, message = `server said ${code}`): pg.DatabaseError {
  const err = new pg.DatabaseError(message, 0, 'error');
  err.severity = 'ERROR';
  err.code = code;
  return err;
}

/** What a write gets while Postgres is down. */
export const connectionRefused = (): Error => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
