import { describe, expect, it } from 'vitest';
import { toolInputProblem, toolSchemaProblem } from '../../../src/config/tool-input-schema.js';

describe('toolSchemaProblem', () => {
  it('accepts an object JSON Schema', () => {
    expect(toolSchemaProblem({ type: 'object', properties: { orderId: { type: 'string' } }, required: ['orderId'], additionalProperties: false })).toBeUndefined();
    expect(toolSchemaProblem({ type: 'object' })).toBeUndefined();
  });

  it('refuses a schema that is not of an object, as the Messages API does', () => {
    expect(toolSchemaProblem({ type: 'string' })).toBe('must be a JSON Schema with "type": "object"');
    expect(toolSchemaProblem({ properties: {} })).toBe('must be a JSON Schema with "type": "object"');
  });

  it('refuses a schema that does not compile, saying why within 500 characters', () => {
    const problem = toolSchemaProblem({ type: 'object', properties: { a: { type: 'no-such-type' } } });
    expect(problem).toMatch(/^is not a valid JSON Schema: /);
    expect(problem!.length).toBeLessThanOrEqual(500);
    expect(toolSchemaProblem({ type: 'object', required: 'orderId' })).toMatch(/^is not a valid JSON Schema: /);
  });
});

describe('toolInputProblem', () => {
  const schema = { type: 'object', properties: { orderId: { type: 'string', minLength: 1 }, filter: { type: 'object', properties: { limit: { type: 'integer' } } } }, required: ['orderId'], additionalProperties: false };

  it('passes an input the schema accepts', () => {
    expect(toolInputProblem(schema, { orderId: 'A-1' })).toBeUndefined();
    expect(toolInputProblem(schema, { orderId: 'A-1', filter: { limit: 2 } })).toBeUndefined();
  });

  it('names a missing required property', () => {
    expect(toolInputProblem(schema, {})).toBe("input must have required property 'orderId'");
  });

  it('names the field at fault with a dotted path', () => {
    expect(toolInputProblem(schema, { orderId: 'A-1', filter: { limit: 'two' } })).toBe('input.filter.limit must be integer');
    expect(toolInputProblem(schema, { orderId: '' })).toBe('input.orderId must NOT have fewer than 1 characters');
  });

  it('refuses properties the schema does not allow', () => {
    expect(toolInputProblem(schema, { orderId: 'A-1', extra: true })).toBe('input must NOT have additional properties');
  });

  it('gives the same answer for the same schema object checked again (compiled once)', () => {
    expect(toolInputProblem(schema, {})).toBe(toolInputProblem(schema, {}));
  });
});
