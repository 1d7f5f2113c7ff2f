import { describe, expect, it } from 'vitest';
import { backwardIncompatibilities } from '../../../src/events/schema-compatibility.js';

type Field = { name: string; type: unknown; default?: unknown; aliases?: string[] };

function record(fields: Field[], name = 'Run'): string {
  return JSON.stringify({ type: 'record', name, namespace: 'dev.sluice.test', fields });
}

const BASE: Field[] = [
  { name: 'runId', type: 'string' },
  { name: 'attempt', type: 'int' },
];

/** Problems reading data written with `old` fields using `next` fields. */
function evolve(old: Field[], next: Field[]): string[] {
  return backwardIncompatibilities(record(next), record(old));
}

describe('backwardIncompatibilities (new schema reads old data)', () => {
  it('accepts an identical schema', () => {
    expect(evolve(BASE, BASE)).toEqual([]);
  });

  it('accepts a field added with a default', () => {
    expect(evolve(BASE, [...BASE, { name: 'dueAt', type: ['null', 'long'], default: null }])).toEqual([]);
  });

  it('rejects a field added without a default, naming it', () => {
    expect(evolve(BASE, [...BASE, { name: 'priority', type: 'int' }])).toEqual([
      'dev.sluice.test.Run.priority: added without a default, so records written before it have no value for it',
    ]);
  });

  it('accepts a removed field: the reader skips it', () => {
    expect(evolve(BASE, BASE.slice(0, 1))).toEqual([]);
  });

  it('accepts a renamed field that keeps the old name as an alias', () => {
    expect(evolve(BASE, [BASE[0] as Field, { name: 'attemptNumber', type: 'int', aliases: ['attempt'] }])).toEqual([]);
  });

  it('rejects an incompatible type change, naming the field and both types', () => {
    expect(evolve(BASE, [BASE[0] as Field, { name: 'attempt', type: 'string' }])).toEqual([
      'dev.sluice.test.Run.attempt: old type int cannot be read as the new type string',
    ]);
  });

  it('accepts int promoted to long, and rejects long narrowed to int', () => {
    const asLong = [BASE[0] as Field, { name: 'attempt', type: 'long' }];
    expect(evolve(BASE, asLong)).toEqual([]);
    expect(evolve(asLong, BASE)).toEqual([
      'dev.sluice.test.Run.attempt: old type long cannot be read as the new type int',
    ]);
  });

  it('lists every problem, not just the first', () => {
    expect(
      evolve(BASE, [
        { name: 'runId', type: 'int' },
        { name: 'attempt', type: 'boolean' },
        { name: 'tenantId', type: 'string' },
      ]),
    ).toHaveLength(3);
  });

  describe('enums', () => {
    const status = (symbols: string[], extra: object = {}): Field[] => [
      { name: 'status', type: { type: 'enum', name: 'Status', symbols, ...extra } },
    ];

    it('accepts a symbol added: old data never has it', () => {
      expect(evolve(status(['queued', 'running']), status(['queued', 'running', 'failed']))).toEqual([]);
    });

    it('rejects a symbol removed when the enum has no default', () => {
      expect(evolve(status(['queued', 'running', 'failed']), status(['queued', 'running']))).toEqual([
        'dev.sluice.test.Run.status: symbol(s) failed removed, and the new enum has no default to read them as',
      ]);
    });

    it('accepts a symbol removed when the enum has a default to read it as', () => {
      expect(
        evolve(status(['interactive', 'batch', 'bulk']), status(['interactive', 'batch'], { default: 'batch' })),
      ).toEqual([]);
    });

    it('rejects a renamed enum', () => {
      const renamed: Field[] = [{ name: 'status', type: { type: 'enum', name: 'State', symbols: ['queued'] } }];
      expect(evolve(status(['queued']), renamed)).toEqual([
        'dev.sluice.test.Run.status: old type dev.sluice.test.Status cannot be read as the new type dev.sluice.test.State',
      ]);
    });
  });

  describe('nullable unions', () => {
    const step = (type: unknown, extra: Partial<Field> = {}): Field[] => [{ name: 'step', type, ...extra }];

    it('accepts making a field nullable', () => {
      expect(evolve(step('string'), step(['null', 'string'], { default: null }))).toEqual([]);
    });

    it('rejects making a nullable field required: old nulls have nowhere to go', () => {
      expect(evolve(step(['null', 'string'], { default: null }), step('string'))).toEqual([
        'dev.sluice.test.Run.step: old union branch null has no match in the new type string',
      ]);
    });

    it('accepts a promotion inside a nullable union', () => {
      expect(evolve(step(['null', 'int'], { default: null }), step(['null', 'long'], { default: null }))).toEqual([]);
    });

    it('rejects an incompatible change inside a nullable union', () => {
      expect(evolve(step(['null', 'string'], { default: null }), step(['null', 'int'], { default: null }))).toEqual([
        'dev.sluice.test.Run.step: old union branch string has no match in the new type [null, int]',
      ]);
    });

    it('accepts a branch added to a union', () => {
      const widened = step(['null', 'string', 'long'], { default: null });
      expect(evolve(step(['null', 'string'], { default: null }), widened)).toEqual([]);
    });

    it('rejects a non-null type no longer in the union', () => {
      expect(evolve(step('string'), step(['null', 'int'], { default: null }))).toEqual([
        'dev.sluice.test.Run.step: old type string is not a branch of the new union [null, int]',
      ]);
    });

    it('names the field inside a nullable nested record', () => {
      const error = (fields: Field[]): Field[] =>
        step(['null', { type: 'record', name: 'RunError', fields }], { default: null });
      const code: Field = { name: 'code', type: 'string' };
      expect(evolve(error([code]), error([code, { name: 'retryable', type: 'boolean' }]))).toEqual([
        'dev.sluice.test.Run.step.retryable: added without a default, so records written before it have no value for it',
      ]);
    });
  });

  it('rejects reading one record type as another', () => {
    expect(backwardIncompatibilities(record(BASE, 'RunStatusChanged'), record(BASE, 'RunRequested'))).toEqual([
      'dev.sluice.test.RunStatusChanged: old type dev.sluice.test.RunRequested cannot be read as the new type ' +
        'dev.sluice.test.RunStatusChanged',
    ]);
  });

  it('throws on a schema that is not valid Avro', () => {
    expect(() => backwardIncompatibilities('{"type":"nope"}', record(BASE))).toThrow(/invalid Avro schema/);
  });
});
