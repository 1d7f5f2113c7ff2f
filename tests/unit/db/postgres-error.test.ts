import { describe, expect, it } from 'vitest';
import { classifyWriteFailure, PostgresRejectedError } from '../../../src/db/postgres-error.js';
import { sqlState } from '../../../src/util/infrastructure-failure.js';
import { TimeoutError } from '../../../src/util/with-timeout.js';
import { serverError } from '../../support/postgres-errors.js';

function nodeError(code: string): Error {
  return Object.assign(new Error(`connect ${code} 127.0.0.1:5432`), { code, errno: -1, syscall: 'connect' });
}

describe('classifyWriteFailure', () => {
  it.each([
    ['08000', 'connection_exception'],
    ['08003', 'connection_does_not_exist'],
    ['08006', 'connection_failure'],
    ['08001', 'sqlclient_unable_to_establish_sqlconnection'],
    ['08P01', 'protocol_violation'],
    ['40001', 'serialization_failure'],
    ['40P01', 'deadlock_detected'],
    ['40003', 'statement_completion_unknown'],
    ['53000', 'insufficient_resources'],
    ['53100', 'disk_full'],
    ['53200', 'out_of_memory'],
    ['53300', 'too_many_connections'],
    ['53400', 'configuration_limit_exceeded'],
    ['57000', 'operator_intervention'],
    ['57014', 'query_canceled (statement timeout)'],
    ['57P01', 'admin_shutdown'],
    ['57P02', 'crash_shutdown'],
    ['57P03', 'cannot_connect_now'],
    ['57P05', 'idle_session_timeout'],
    ['58030', 'io_error'],
    ['55P03', 'lock_not_available'],
    ['25P03', 'idle_in_transaction_session_timeout'],
  ])('%s (%s) is transient', (code) => {
    expect(classifyWriteFailure(serverError(code))).toBe('transient');
  });

  it.each([
    ['22P05', 'untranslatable_character (\\u0000 in jsonb)'],
    ['22P02', 'invalid_text_representation (lone surrogate escape in jsonb, bad uuid)'],
    ['22021', 'character_not_in_repertoire (NUL in text)'],
    ['22007', 'invalid_datetime_format'],
    ['22008', 'datetime_field_overflow (timestamp out of range)'],
    ['22003', 'numeric_value_out_of_range'],
    ['22001', 'string_data_right_truncation'],
    ['23502', 'not_null_violation'],
    ['23505', 'unique_violation'],
    ['23514', 'check_violation'],
    ['54000', 'program_limit_exceeded'],
    ['54001', 'statement_too_complex (JSON nested too deep)'],
  ])('%s (%s) is a refused value', (code) => {
    expect(classifyWriteFailure(serverError(code))).toBe('data');
  });

  it.each([
    ['42P01', 'undefined_table'],
    ['42703', 'undefined_column'],
    ['42601', 'syntax_error'],
    ['42501', 'insufficient_privilege'],
    ['42804', 'datatype_mismatch'],
    ['0A000', 'feature_not_supported'],
    ['25P02', 'in_failed_sql_transaction'],
    ['XX000', 'internal_error'],
    ['P0001', 'raise_exception'],
    ['28P01', 'invalid_password'],
    ['3D000', 'invalid_catalog_name'],
  ])('%s (%s) is permanent but not blamed on the data', (code) => {
    expect(classifyWriteFailure(serverError(code))).toBe('permanent');
  });

  it.each(['ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'EHOSTDOWN', 'ENETUNREACH', 'ENETDOWN', 'ENOTFOUND', 'EAI_AGAIN', 'EADDRNOTAVAIL'])(
    'a socket error %s is transient',
    (code) => {
      expect(classifyWriteFailure(nodeError(code))).toBe('transient');
    },
  );

  it.each([
    'Connection terminated',
    'Connection terminated unexpectedly',
    'Connection terminated due to connection timeout',
    'timeout exceeded when trying to connect',
    'timeout expired',
    'Query read timeout',
    'Client has encountered a connection error and is not queryable',
    'Client was closed and is not queryable',
    'Cannot use a pool after calling end on the pool',
  ])('the driver error "%s" is transient', (message) => {
    expect(classifyWriteFailure(new Error(message))).toBe('transient');
  });

  it('a timeout of our own is transient', () => {
    expect(classifyWriteFailure(new TimeoutError('archive timed out after 5000 ms'))).toBe('transient');
  });

  it('looks through causes and AggregateErrors (Node reports a refused dual-stack connect as one)', () => {
    expect(classifyWriteFailure(new Error('write failed', { cause: nodeError('ECONNRESET') }))).toBe('transient');
    expect(classifyWriteFailure(new Error('outer', { cause: new Error('mid', { cause: serverError('57P01') }) }))).toBe('transient');
    expect(classifyWriteFailure(new AggregateError([nodeError('ECONNREFUSED'), nodeError('ECONNREFUSED')], 'connect failed'))).toBe('transient');
    expect(classifyWriteFailure(new AggregateError([new Error('x')], 'y'))).toBe('permanent');
  });

  it('stops following a cause chain that loops', () => {
    const a = new Error('a');
    const b = new Error('b', { cause: a });
    Object.assign(a, { cause: b });
    expect(classifyWriteFailure(a)).toBe('permanent');
  });

  it('an error raised while preparing a value, with no SQLSTATE, is permanent', () => {
    expect(classifyWriteFailure(new Error('circular reference detected while preparing "[object Object]" for query'))).toBe('permanent');
    expect(classifyWriteFailure(new TypeError('Cannot convert a BigInt value to a number'))).toBe('permanent');
  });

  it('anything else is permanent, whatever it is', () => {
    for (const thrown of [undefined, null, 'a string', 42, {}, { code: 42 }, { code: '22P05' }, new Error('')]) {
      expect(classifyWriteFailure(thrown)).toBe('permanent');
    }
  });
});

describe('sqlState', () => {
  it('is the code of a server error only', () => {
    expect(sqlState(serverError('22P05'))).toBe('22P05');
    // Node's EPIPE looks like a SQLSTATE but carries no severity.
    expect(sqlState(nodeError('EPIPE'))).toBeUndefined();
    expect(sqlState(Object.assign(new Error('x'), { code: 'abcde', severity: 'ERROR' }))).toBeUndefined();
    expect(sqlState(null)).toBeUndefined();
  });
});

describe('PostgresRejectedError', () => {
  it('names the SQLSTATE and the server message, and keeps the cause', () => {
    const cause = serverError('22P05', 'unsupported Unicode escape sequence');
    const err = new PostgresRejectedError(cause);
    expect(err.name).toBe('PostgresRejectedError');
    expect(err.message).toBe('SQLSTATE 22P05: unsupported Unicode escape sequence');
    expect(err.sqlState).toBe('22P05');
    expect(err.cause).toBe(cause);
  });

  it('says so when there is no SQLSTATE', () => {
    expect(new PostgresRejectedError(new TypeError('bad value')).message).toBe('no SQLSTATE: bad value');
    expect(new PostgresRejectedError('thrown string').message).toBe('no SQLSTATE: thrown string');
  });
});
