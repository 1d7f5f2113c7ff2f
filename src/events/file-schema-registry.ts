import { createHash, randomUUID } from 'node:crypto';
import { link, mkdir, open, readFile, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { CachingSchemaRegistry, MAX_INT32, SchemaIdCollisionError, SchemaNotFoundError } from './schema-registry.js';
import { canonicalSchemaJson } from './schemas.js';

function isErrnoCode(err: unknown, code: string): boolean {
  return (err as NodeJS.ErrnoException | null)?.code === code;
}

/**
 * Embedded registry in a directory. An id is derived from the SHA-256 of the canonical schema
 * text, so processes sharing the directory (or not sharing anything) agree on ids without
 * coordination and ids survive restarts. Layout:
 *   ids/<id>.avsc             canonical schema text, immutable once written
 *   subjects/<subject>.json   {subject, versions: [{version, id}]}, informational
 */
export class FileSchemaRegistry extends CachingSchemaRegistry {
  private readonly subjectWrites = new Map<string, Promise<void>>();

  constructor(readonly dir: string) {
    super();
  }

  protected override normalize(schemaJson: string): string {
    return canonicalSchemaJson(schemaJson);
  }

  protected fetchSchema(id: number): Promise<string> {
    return readFile(this.idPath(id), 'utf8').catch((err: unknown) => {
      throw isErrnoCode(err, 'ENOENT') ? new SchemaNotFoundError(id) : err;
    });
  }

  protected async registerUncached(subject: string, canonical: string): Promise<number> {
    const digest = createHash('sha256').update(canonical).digest();
    // Id 0 is not a valid Confluent id; the collision check covers the one hash that maps onto 1.
    const id = digest.readUInt32BE(0) & MAX_INT32 || 1;
    await this.publishSchema(id, canonical);
    await this.recordVersion(subject, id);
    return id;
  }

  private idPath(id: number): string {
    return join(this.dir, 'ids', `${id}.avsc`);
  }

  private async publishSchema(id: number, canonical: string): Promise<void> {
    const path = this.idPath(id);
    const existing = await readFile(path, 'utf8').catch((err: unknown) => {
      if (isErrnoCode(err, 'ENOENT')) return undefined;
      throw err;
    });
    if (existing === undefined) {
      await mkdir(join(this.dir, 'ids'), { recursive: true });
      const tmp = await writeTempFile(path, canonical);
      try {
        // link() publishes the complete file atomically like rename() would, but fails instead of
        // replacing an existing file, so a colliding schema written concurrently is detected below.
        await link(tmp, path);
        return;
      } catch (err) {
        if (!isErrnoCode(err, 'EEXIST')) throw err;
      } finally {
        await unlink(tmp);
      }
    }
    if ((existing ?? (await readFile(path, 'utf8'))) !== canonical) throw new SchemaIdCollisionError(id);
  }

  private recordVersion(subject: string, id: number): Promise<void> {
    // Serialized per subject within this process; across processes a concurrent new version can
    // be lost from the listing, which only the listing itself relies on.
    const previous = this.subjectWrites.get(subject) ?? Promise.resolve();
    const next = previous.catch(() => undefined).then(() => this.appendVersion(subject, id));
    this.subjectWrites.set(subject, next);
    return next;
  }

  private async appendVersion(subject: string, id: number): Promise<void> {
    const dir = join(this.dir, 'subjects');
    const path = join(dir, `${encodeURIComponent(subject)}.json`);
    const listing = await readFile(path, 'utf8').then(
      (text): SubjectListing => JSON.parse(text) as SubjectListing,
      (err: unknown): SubjectListing => {
        if (isErrnoCode(err, 'ENOENT')) return { subject, versions: [] };
        throw err;
      },
    );
    if (listing.versions.some((v) => v.id === id)) return;
    const version = listing.versions.reduce((max, v) => Math.max(max, v.version), 0) + 1;
    listing.versions.push({ version, id });
    await mkdir(dir, { recursive: true });
    const tmp = await writeTempFile(path, `${JSON.stringify(listing, null, 2)}\n`);
    try {
      await rename(tmp, path);
    } catch (err) {
      await unlink(tmp).catch(() => undefined);
      throw err;
    }
  }
}

interface SubjectListing {
  subject: string;
  versions: { version: number; id: number }[];
}

/** Writes and fsyncs a uniquely named sibling of `path`, so publishing it cannot expose a partial file. */
async function writeTempFile(path: string, content: string): Promise<string> {
  const tmp = `${path}.${process.pid}.${randomUUID()}.tmp`;
  const handle = await open(tmp, 'wx');
  try {
    await handle.writeFile(content, 'utf8');
    await handle.sync();
  } finally {
    await handle.close();
  }
  return tmp;
}
