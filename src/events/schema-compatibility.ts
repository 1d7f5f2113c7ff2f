import avro from 'avsc';
import type { Type } from 'avsc';
import { parseSchema } from './schemas.js';

/** avsc types both its union classes separately; this is what they share. */
type Union = Type & { readonly types: readonly Type[] };

/**
 * Why data written with `writerSchema` (the old schema) cannot be read with `readerSchema` (the
 * new one), following Avro schema resolution; empty when it can. This is the registry's BACKWARD
 * rule: consumers upgraded to the new schema must still read every record already in the topics.
 *
 * avsc's resolver says only that resolution failed, and only for the first problem; this walks
 * records, unions and enums so that each message names the field and what breaks it.
 */
export function backwardIncompatibilities(readerSchema: string, writerSchema: string): string[] {
  const reader = parseSchema(readerSchema);
  return incompatibilities(reader, parseSchema(writerSchema), describe(reader));
}

function incompatibilities(reader: Type, writer: Type, path: string): string[] {
  if (resolves(reader, writer)) return [];
  if (avro.Type.isType(reader, 'record') && avro.Type.isType(writer, 'record')) {
    const problems = recordIncompatibilities(reader as avro.types.RecordType, writer as avro.types.RecordType, path);
    if (problems.length > 0) return problems;
  }
  if (avro.Type.isType(reader, 'enum') && avro.Type.isType(writer, 'enum')) {
    const problems = enumIncompatibilities(reader as avro.types.EnumType, writer as avro.types.EnumType, path);
    if (problems.length > 0) return problems;
  }
  if (avro.Type.isType(writer, 'union')) {
    return unionIncompatibilities(reader, writer as Union, path);
  }
  if (avro.Type.isType(reader, 'union')) {
    const branch = counterpart((reader as Union).types, writer);
    return branch
      ? incompatibilities(branch, writer, path)
      : [`${path}: old type ${describe(writer)} is not a branch of the new union ${describe(reader)}`];
  }
  return [`${path}: old type ${describe(writer)} cannot be read as the new type ${describe(reader)}`];
}

function recordIncompatibilities(
  reader: avro.types.RecordType,
  writer: avro.types.RecordType,
  path: string,
): string[] {
  return reader.fields.flatMap((field) => {
    const fieldPath = `${path}.${field.name}`;
    const old = writer.fields.find((w) => w.name === field.name || field.aliases.includes(w.name));
    if (old) return incompatibilities(field.type, old.type, fieldPath);
    return field.defaultValue() === undefined
      ? [`${fieldPath}: added without a default, so records written before it have no value for it`]
      : [];
  });
}

/** Called only when resolution failed: with a default, missing symbols would have resolved. */
function enumIncompatibilities(reader: avro.types.EnumType, writer: avro.types.EnumType, path: string): string[] {
  const missing = writer.symbols.filter((symbol) => !reader.symbols.includes(symbol));
  return missing.length > 0
    ? [`${path}: symbol(s) ${missing.join(', ')} removed, and the new enum has no default to read them as`]
    : [];
}

/** Every branch an old record may have used must be readable by the new schema. */
function unionIncompatibilities(reader: Type, writer: Union, path: string): string[] {
  return writer.types.flatMap((branch) => {
    if (resolves(reader, branch)) return [];
    const target = avro.Type.isType(reader, 'union') ? counterpart((reader as Union).types, branch) : reader;
    if (target && target.typeName === branch.typeName) return incompatibilities(target, branch, path);
    return [`${path}: old union branch ${describe(branch)} has no match in the new type ${describe(reader)}`];
  });
}

/** The reader branch an old value of `writer` would be read into: same name, else same kind. */
function counterpart(branches: readonly Type[], writer: Type): Type | undefined {
  return (
    branches.find((b) => writer.name !== undefined && b.name === writer.name) ??
    branches.find((b) => b.typeName === writer.typeName)
  );
}

function resolves(reader: Type, writer: Type): boolean {
  try {
    reader.createResolver(writer);
    return true;
  } catch {
    return false;
  }
}

function describe(type: Type): string {
  if (avro.Type.isType(type, 'union')) {
    return `[${(type as Union).types.map(describe).join(', ')}]`;
  }
  return type.name ?? type.typeName;
}
