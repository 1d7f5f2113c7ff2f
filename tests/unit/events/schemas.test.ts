import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import avro from 'avsc';
import { describe, expect, it } from 'vitest';
import {
  RUN_CLASSES,
  RUN_STATUSES,
  SUBJECTS,
  canonicalSchemaJson,
  eventSchema,
  loadEventSchemas,
} from '../../../src/events/schemas.js';
import { packageRoot } from '../../../src/util/package-root.js';
import { deadLetter, runRequested, runStatusChanged } from './fixtures.js';

const RUN_FIELDS = ['runId', 'tenantId', 'workflow', 'class', 'admittedAt', 'deadline', 'attempt', 'traceparent'];

function recordType(subject: string): avro.types.RecordType {
  const schema = loadEventSchemas().get(subject);
  if (!schema) throw new Error(`missing ${subject}`);
  return schema.type as avro.types.RecordType;
}

describe('event schemas', () => {
  it('loads the bundled schemas from the package root, keyed by record full name', () => {
    expect(packageRoot()).toBe(process.cwd());
    expect([...loadEventSchemas().keys()].sort()).toEqual(Object.values(SUBJECTS).sort());
  });

  it('run events start with the common run fields', () => {
    for (const subject of [SUBJECTS.runRequested, SUBJECTS.runStatusChanged]) {
      expect(recordType(subject).fields.slice(0, RUN_FIELDS.length).map((f) => f.name)).toEqual(RUN_FIELDS);
    }
  });

  it('the TypeScript enums list the same symbols as the .avsc files', () => {
    const classType = recordType(SUBJECTS.runRequested).field('class').type as avro.types.EnumType;
    const statusType = recordType(SUBJECTS.runStatusChanged).field('status').type as avro.types.EnumType;
    expect(classType.symbols).toEqual(RUN_CLASSES);
    expect(statusType.symbols).toEqual(RUN_STATUSES);
  });

  it('every record has a doc and every optional field is a null-first union defaulting to null', () => {
    for (const file of ['RunRequested', 'RunStatusChanged', 'DeadLetter', 'RunSubmission']) {
      const json = JSON.parse(readFileSync(join(packageRoot(), 'schemas', `${file}.avsc`), 'utf8')) as {
        namespace: string;
        doc?: string;
        fields: { name: string; type: unknown; default?: unknown; doc?: string }[];
      };
      expect(json.namespace).toBe('dev.sluice.events');
      expect(json.doc).toBeTruthy();
      for (const field of json.fields) {
        expect(field.doc, `${file}.${field.name} doc`).toBeTruthy();
        if (Array.isArray(field.type)) {
          expect(field.type[0], `${file}.${field.name}`).toBe('null');
          expect(field, `${file}.${field.name}`).toHaveProperty('default', null);
        }
      }
    }
  });

  it('round-trips each event through its avsc type with numbers for timestamps and Buffers for bytes', () => {
    const cases = [
      [SUBJECTS.runRequested, runRequested],
      [SUBJECTS.runStatusChanged, runStatusChanged],
      [SUBJECTS.deadLetter, deadLetter],
    ] as const;
    for (const [subject, value] of cases) {
      const type = recordType(subject);
      const decoded: unknown = type.fromBuffer(type.toBuffer(value));
      expect(decoded).toEqual(value);
    }
    const dl = recordType(SUBJECTS.deadLetter).fromBuffer(recordType(SUBJECTS.deadLetter).toBuffer(deadLetter)) as {
      payload: unknown;
      firstFailureAt: unknown;
    };
    expect(Buffer.isBuffer(dl.payload)).toBe(true);
    expect(typeof dl.firstFailureAt).toBe('number');
  });

  it('treats an unknown class symbol from a newer writer as batch', () => {
    const writer = avro.Type.forSchema({
      type: 'enum',
      name: 'dev.sluice.events.RunClass',
      symbols: ['interactive', 'batch', 'realtime'],
    });
    const reader = recordType(SUBJECTS.runRequested).field('class').type;
    expect(reader.fromBuffer(writer.toBuffer('realtime'), reader.createResolver(writer))).toBe('batch');
  });

  it('canonical JSON ignores key order and whitespace but keeps docs and logical types', () => {
    const a = '{"type":"record","name":"X","doc":"d","fields":[{"name":"t","type":{"type":"long","logicalType":"timestamp-millis"}}]}';
    const b = `{
      "fields": [ { "type": { "logicalType": "timestamp-millis", "type": "long" }, "name": "t" } ],
      "doc": "d", "name": "X", "type": "record"
    }`;
    expect(canonicalSchemaJson(a)).toBe(canonicalSchemaJson(b));
    expect(canonicalSchemaJson(a)).toContain('"doc":"d"');
    expect(canonicalSchemaJson(a)).toContain('timestamp-millis');
    expect(canonicalSchemaJson(a)).not.toBe(canonicalSchemaJson(a.replace('"doc":"d"', '"doc":"e"')));
  });

  it('rejects text that is not an Avro schema and event schemas that are not named records', () => {
    expect(() => canonicalSchemaJson('{"type":')).toThrow(/not valid JSON/);
    expect(() => canonicalSchemaJson('{"type":"record","name":"X"}')).toThrow(/invalid Avro schema/);
    expect(() => eventSchema('"string"')).toThrow(/named record/);
  });

  it('RunRequested.tokenReservation: events written before the field read as null; a reservation round-trips', () => {
    const current = recordType(SUBJECTS.runRequested);
    const schema = JSON.parse(readFileSync(join(packageRoot(), 'schemas', 'RunRequested.avsc'), 'utf8')) as { fields: Array<{ name: string }> };
    const older = avro.Type.forSchema({ ...schema, fields: schema.fields.filter((f) => f.name !== 'tokenReservation') } as avro.Schema);
    const { tokenReservation: _dropped, ...oldEvent } = runRequested;
    const decoded = current.createResolver(older);
    expect(current.fromBuffer(older.toBuffer(oldEvent), decoded as never)).toMatchObject({ tokenReservation: null });
    expect(current.fromBuffer(current.toBuffer({ ...runRequested, tokenReservation: 1_234 }))).toMatchObject({ tokenReservation: 1_234 });
    expect(current.fromBuffer(current.toBuffer({ ...runRequested, tokenReservation: undefined }))).toMatchObject({ tokenReservation: null });
  });

  it('RunRequested.prepaidTurns: events written before the field read as null; reserved turns round-trip', () => {
    const current = recordType(SUBJECTS.runRequested);
    const schema = JSON.parse(readFileSync(join(packageRoot(), 'schemas', 'RunRequested.avsc'), 'utf8')) as { fields: Array<{ name: string }> };
    const older = avro.Type.forSchema({ ...schema, fields: schema.fields.filter((f) => f.name !== 'prepaidTurns') } as avro.Schema);
    const { prepaidTurns: _dropped, ...oldEvent } = runRequested;
    expect(current.fromBuffer(older.toBuffer(oldEvent), current.createResolver(older) as never)).toMatchObject({ prepaidTurns: null });
    const turns = [{ dependency: 'anthropic', calls: 2, notBefore: 1_765_000_000_123 }];
    expect(current.fromBuffer(current.toBuffer({ ...runRequested, prepaidTurns: turns }))).toMatchObject({ prepaidTurns: turns });
  });
});
