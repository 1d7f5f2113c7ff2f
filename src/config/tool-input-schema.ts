import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';

/**
 * The JSON Schemas of tools' inputs: checked once at start-up (a schema that does not compile
 * exits with the field named) and then used to check each input a model sends to a tool. Ajv
 * compiles a schema to code, so every distinct schema is compiled once per process.
 */
const ajv = new Ajv({ allErrors: false, strict: false });
const compiled = new WeakMap<object, ValidateFunction>();

/** Why a schema is not usable as a tool's input schema, or undefined when it is. */
export function toolSchemaProblem(schema: Record<string, unknown>): string | undefined {
  // The Messages API takes only object schemas as a tool's input_schema.
  if (schema.type !== 'object') return 'must be a JSON Schema with "type": "object"';
  try {
    validatorOf(schema);
    return undefined;
  } catch (err) {
    return `is not a valid JSON Schema: ${(err as Error).message}`.slice(0, 500);
  }
}

function validatorOf(schema: Record<string, unknown>): ValidateFunction {
  let validate = compiled.get(schema);
  if (!validate) {
    validate = ajv.compile(schema);
    compiled.set(schema, validate);
  }
  return validate;
}

/** Why `input` fails the schema (the first error, as a model can act on it), or undefined when it passes. */
export function toolInputProblem(schema: Record<string, unknown>, input: unknown): string | undefined {
  const validate = validatorOf(schema);
  if (validate(input)) return undefined;
  const [first] = validate.errors ?? [];
  return first ? describeError(first) : 'the input does not match the schema';
}

function describeError(error: ErrorObject): string {
  const where = error.instancePath === '' ? 'input' : `input${error.instancePath.replaceAll('/', '.')}`;
  return `${where} ${error.message ?? 'is invalid'}`;
}
