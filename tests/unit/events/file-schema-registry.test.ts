import { readFile, readdir, writeFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FileSchemaRegistry } from '../../../src/events/file-schema-registry.js';
import { SchemaIdCollisionError, SchemaNotFoundError } from '../../../src/events/schema-registry.js';
import { SUBJECTS, canonicalSchemaJson, loadEventSchemas } from '../../../src/events/schemas.js';
import { tempDir } from './fixtures.js';

const schemas = [...loadEventSchemas().values()];
const v2 = JSON.stringify({
  type: 'record',
  name: 'RunRequested',
  namespace: 'dev.sluice.events',
  fields: [{ name: 'runId', type: 'string' }],
});

describe('FileSchemaRegistry', () => {
  let dir: { path: string; remove: () => Promise<void> };
  beforeEach(async () => {
    dir = await tempDir();
  });
  afterEach(async () => {
    await dir.remove();
  });

  it('gives the same positive int32 id across instances, restarts and unrelated directories', async () => {
    const first = new FileSchemaRegistry(dir.path);
    const ids = await Promise.all(schemas.map((s) => first.register(s.subject, s.canonical)));
    for (const id of ids) {
      expect(Number.isInteger(id) && id > 0 && id <= 0x7fffffff).toBe(true);
    }
    expect(new Set(ids).size).toBe(ids.length);

    const restarted = new FileSchemaRegistry(dir.path);
    expect(await Promise.all(schemas.map((s) => restarted.register(s.subject, s.canonical)))).toEqual(ids);

    const other = await tempDir();
    try {
      const elsewhere = new FileSchemaRegistry(other.path);
      expect(await Promise.all(schemas.map((s) => elsewhere.register(s.subject, s.canonical)))).toEqual(ids);
    } finally {
      await other.remove();
    }
  });

  it('serves the canonical schema by id, also to an instance that never registered it', async () => {
    const schema = schemas[0]!;
    const id = await new FileSchemaRegistry(dir.path).register(schema.subject, schema.canonical);
    expect(await new FileSchemaRegistry(dir.path).schemaById(id)).toBe(schema.canonical);
  });

  it('maps reformatted text of the same schema to the same id', async () => {
    const registry = new FileSchemaRegistry(dir.path);
    const pretty = JSON.stringify(JSON.parse(v2), null, 4);
    expect(await registry.register('s', pretty)).toBe(await registry.register('s', v2));
  });

  it('survives many concurrent registrations from independent instances on one directory', async () => {
    const instances = Array.from({ length: 16 }, () => new FileSchemaRegistry(dir.path));
    const calls = instances.flatMap((registry) =>
      [...schemas, { subject: SUBJECTS.runRequested, canonical: canonicalSchemaJson(v2) }].map((s) =>
        registry.register(s.subject, s.canonical),
      ),
    );
    const ids = await Promise.all(calls);
    const perInstance = ids.length / instances.length;
    for (let i = 0; i < ids.length; i++) expect(ids[i]).toBe(ids[i % perInstance]);

    const files = (await readdir(join(dir.path, 'ids'))).sort();
    expect(files).toEqual([...new Set(ids)].map((id) => `${id}.avsc`).sort());
    for (const id of new Set(ids)) {
      const text = await new FileSchemaRegistry(dir.path).schemaById(id);
      expect(() => JSON.parse(text) as unknown).not.toThrow();
    }
  });

  it('lists the versions of a subject', async () => {
    const registry = new FileSchemaRegistry(dir.path);
    const v1 = loadEventSchemas().get(SUBJECTS.runRequested)!;
    const id1 = await registry.register(v1.subject, v1.canonical);
    const id2 = await registry.register(v1.subject, v2);
    await registry.register(v1.subject, v1.canonical);
    const listing = JSON.parse(
      await readFile(join(dir.path, 'subjects', `${SUBJECTS.runRequested}.json`), 'utf8'),
    ) as unknown;
    expect(listing).toEqual({
      subject: SUBJECTS.runRequested,
      versions: [
        { version: 1, id: id1 },
        { version: 2, id: id2 },
      ],
    });
  });

  it('refuses a schema whose id is already held by a different schema', async () => {
    const id = await new FileSchemaRegistry(dir.path).register('s', v2);
    const fresh = await tempDir();
    try {
      await mkdir(join(fresh.path, 'ids'), { recursive: true });
      await writeFile(join(fresh.path, 'ids', `${id}.avsc`), '"string"');
      const err = await new FileSchemaRegistry(fresh.path).register('s', v2).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SchemaIdCollisionError);
      expect((err as SchemaIdCollisionError).id).toBe(id);
    } finally {
      await fresh.remove();
    }
  });

  it('rejects unknown and invalid ids with SchemaNotFoundError, and invalid schemas on register', async () => {
    const registry = new FileSchemaRegistry(dir.path);
    for (const id of [123, 0, -5, 2 ** 31, 1.5]) {
      await expect(registry.schemaById(id)).rejects.toBeInstanceOf(SchemaNotFoundError);
    }
    await expect(registry.register('s', '{"type":"nope"}')).rejects.toThrow(/invalid Avro schema/);
  });
});
