import { describe, expect, it } from 'vitest';
import { splitBrokers } from '../../../../src/dev/infra/local-infra.js';
import { databaseName, maintenanceUrl, quoteIdent } from '../../../../src/dev/infra/postgres.js';

describe('database URLs', () => {
  it('takes the database from the path, else from the user, as libpq does', () => {
    expect(databaseName('postgres://postgres@127.0.0.1:5432/sluice')).toBe('sluice');
    expect(databaseName('postgres://u:p@db/my%20db?sslmode=require')).toBe('my db');
    expect(databaseName('postgres://alice@db')).toBe('alice');
  });

  it('points the maintenance URL at the postgres database, keeping credentials and options', () => {
    expect(maintenanceUrl('postgres://u:p@db:6543/sluice?sslmode=require')).toBe('postgres://u:p@db:6543/postgres?sslmode=require');
  });

  it('quotes identifiers', () => {
    expect(quoteIdent('sluice')).toBe('"sluice"');
    expect(quoteIdent('we"ird')).toBe('"we""ird"');
  });
});

describe('splitBrokers', () => {
  it('splits a comma-separated list and drops blanks', () => {
    expect(splitBrokers(' a:9092, b:9092 ,,')).toEqual(['a:9092', 'b:9092']);
  });
});
