import { createHash, randomUUID } from 'node:crypto';
import { link, mkdir, open, readFile, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { canonicalSchemaJson } from './schemas.js';

/** The two operations of a Confluent-compatible schema registry that the codec needs. */
export interface SchemaRegistry {
  /** Registers `schemaJson` under `subject` (idempotent) and returns its global schema id. */
  register(subject: string, schemaJson: string): Promise<number>;
  /** Schema text for an id; rejects with SchemaNotFoundError when the registry has no such id. */
  schemaById(id: number): Promise<string>;
}

/** The registry answered, and it has no schema with this id: records carrying it are undecodable. */
export class SchemaNotFoundError extends Error {
  override readonly name = 'SchemaNotFoundError';
  constructor(readonly id: number) {
    super(`schema id ${id} is not registered`);
  }
}

/** The registry could not be used (unreachable, timed out, refused the request, bad answer). */
export class SchemaRegistryError extends Error {
  override readonly name = 'SchemaRegistryError';
  constructor(
    message: string,
    /** Worth trying again later: network failure, timeout, 429 or 5xx. */
    readonly retryable: boolean,
    readonly status?: number,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** Two different schemas hash to the same file-registry id; the second cannot be registered. */
export class SchemaIdCollisionError extends Error {
  override readonly name = 'SchemaIdCollisionError';
  constructor(readonly id: number) {
    super(`schema id ${id} is already taken by a different schema`);
  }
}

const MAX_INT32 = 0x7fffffff;

function isSchemaId(id: number): boolean {
  return Number.isInteger(id) && id > 0 && id <= MAX_INT32;
}

function isErrnoCode(err: unknown, code: string): boolean {
  return (err as NodeJS.ErrnoException | null)?.code === code;
}

/**
 * Both registries answer from memory after the first success; a failed lookup is forgotten so
 * the next call asks again.
 */
abstract class CachingSchemaRegistry implements SchemaRegistry {
  private readonly registered = new Map<string, Promise<number>>();
  private readonly schemas = new Map<number, Promise<string>>();

  protected abstract registerUncached(subject: string, schemaJson: string): Promise<number>;
  protected abstract fetchSchema(id: number): Promise<string>;

  /** The form a schema is registered in; also what makes two texts "the same schema". */
  protected normalize(schemaJson: string): string {
    return schemaJson;
  }

  register(subject: string, schemaJson: string): Promise<number> {
    let normalized: string;
    try {
      normalized = this.normalize(schemaJson);
    } catch (err) {
      return Promise.reject(err as Error);
    }
    return remember(this.registered, `${subject}\n${normalized}`, () => this.registerUncached(subject, normalized));
  }

  schemaById(id: number): Promise<string> {
    if (!isSchemaId(id)) return Promise.reject(new SchemaNotFoundError(id));
    return remember(this.schemas, id, () => this.fetchSchema(id));
  }
}

function remember<K, V>(cache: Map<K, Promise<V>>, key: K, create: () => Promise<V>): Promise<V> {
  let value = cache.get(key);
  if (!value) {
    value = create();
    cache.set(key, value);
    value.catch(() => cache.delete(key));
  }
  return value;
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

export interface HttpSchemaRegistryOptions {
  /** Per request, including reading the response body. Default 5000. */
  timeoutMs?: number;
}

const CONTENT_TYPE = 'application/vnd.schemaregistry.v1+json';
/** Confluent's error_code for "schema not found". */
const SCHEMA_NOT_FOUND = 40403;

/**
 * Client for a Confluent-compatible schema registry. Credentials in the URL
 * (`https://key:secret@host`) are sent as HTTP basic auth, as Confluent Cloud expects.
 */
export class HttpSchemaRegistry extends CachingSchemaRegistry {
  private readonly baseUrl: string;
  private readonly authorization: string | undefined;
  private readonly timeoutMs: number;

  constructor(url: string, options: HttpSchemaRegistryOptions = {}) {
    super();
    const parsed = new URL(url);
    if (parsed.username || parsed.password) {
      const user = decodeURIComponent(parsed.username);
      const password = decodeURIComponent(parsed.password);
      this.authorization = `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
      parsed.username = '';
      parsed.password = '';
    }
    this.baseUrl = parsed.toString().replace(/\/+$/, '');
    this.timeoutMs = options.timeoutMs ?? 5000;
  }

  protected registerUncached(subject: string, schemaJson: string): Promise<number> {
    return this.request('POST', `/subjects/${encodeURIComponent(subject)}/versions`, { schema: schemaJson }).then((body) => {
      const value = (body as { id?: unknown } | null)?.id;
      if (typeof value !== 'number' || !isSchemaId(value)) {
        throw new SchemaRegistryError(`registering ${subject}: response has no valid id`, false);
      }
      return value;
    });
  }

  protected fetchSchema(id: number): Promise<string> {
    return this.request('GET', `/schemas/ids/${id}`).then(
      (body) => {
        const value = (body as { schema?: unknown } | null)?.schema;
        if (typeof value !== 'string') {
          throw new SchemaRegistryError(`schema id ${id}: response has no schema`, false);
        }
        return value;
      },
      (err: unknown) => {
        if (err instanceof HttpStatusError && err.status === 404 && err.errorCode === SCHEMA_NOT_FOUND) {
          throw new SchemaNotFoundError(id);
        }
        throw err;
      },
    );
  }

  private async request(method: 'GET' | 'POST', path: string, body?: unknown): Promise<unknown> {
    const url = `${this.baseUrl}${path}`;
    const headers: Record<string, string> = { accept: CONTENT_TYPE };
    if (body !== undefined) headers['content-type'] = CONTENT_TYPE;
    if (this.authorization) headers.authorization = this.authorization;
    let status: number;
    let text: string;
    try {
      const res = await fetch(url, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      status = res.status;
      text = await res.text();
    } catch (err) {
      const reason =
        (err as Error | null)?.name === 'TimeoutError'
          ? `timed out after ${this.timeoutMs} ms`
          : `failed: ${describeFetchError(err)}`;
      throw new SchemaRegistryError(`schema registry ${method} ${url} ${reason}`, true, undefined, { cause: err });
    }
    if (status < 200 || status >= 300) {
      throw new HttpStatusError(method, url, status, text);
    }
    try {
      return JSON.parse(text) as unknown;
    } catch (err) {
      throw new SchemaRegistryError(
        `schema registry ${method} ${url}: response is not JSON: ${excerpt(text)}`,
        false,
        status,
        { cause: err },
      );
    }
  }
}

class HttpStatusError extends SchemaRegistryError {
  readonly errorCode: number | undefined;
  constructor(method: string, url: string, status: number, body: string) {
    super(
      `schema registry ${method} ${url} answered ${status}: ${excerpt(body)}`,
      status === 429 || status >= 500,
      status,
    );
    let code: unknown;
    try {
      code = (JSON.parse(body) as { error_code?: unknown } | null)?.error_code;
    } catch {
      code = undefined;
    }
    this.errorCode = typeof code === 'number' ? code : undefined;
  }
}

function excerpt(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > 300 ? `${flat.slice(0, 300)}…` : flat || '(empty body)';
}

/** undici reports "fetch failed" and hides the useful part (ECONNREFUSED, ENOTFOUND) in `cause`. */
function describeFetchError(err: unknown): string {
  const message = (err as Error | null)?.message ?? String(err);
  const cause = (err as { cause?: { code?: unknown; message?: unknown } } | null)?.cause;
  const detail = cause?.code ?? cause?.message;
  return typeof detail === 'string' ? `${message} (${detail})` : message;
}
