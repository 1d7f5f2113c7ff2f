import type { Type } from 'avsc';
import type { SchemaRegistry } from './schema-registry.js';
import { SchemaNotFoundError } from './schema-registry.js';
import { type EventBySubject, type EventSchema, loadEventSchemas, parseSchema } from './schemas.js';

export type EventDecodeReason = 'bad_magic' | 'too_short' | 'unknown_schema' | 'bad_avro';

/**
 * The bytes of a record cannot be decoded, now or on redelivery: the record is poison and belongs
 * in the DLQ. `unknown_schema` also covers a writer schema the reader cannot resolve (a different
 * record type, or an incompatible change).
 */
export class EventDecodeError extends Error {
  override readonly name = 'EventDecodeError';
  constructor(
    readonly reason: EventDecodeReason,
    message: string,
    /** The writer schema id from the header, when the header was readable. */
    readonly schemaId?: number,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

type Resolver = ReturnType<Type['createResolver']>;
type Resolution = { resolver: Resolver | undefined } | { incompatible: string };

const MAGIC_BYTE = 0;
const HEADER_LENGTH = 5;

/**
 * Confluent wire format: magic byte 0, big-endian int32 schema id, Avro binary body. Encodes with
 * the local schema of a subject (registering it once), decodes with the writer schema named by the
 * id, resolved into the local reader schema of the requested subject.
 *
 * Registry failures other than "no such id" (unreachable, timeout) are rethrown as they are: the
 * record is fine, and retrying later will decode it.
 */
export class EventCodec {
  private readonly schemas: ReadonlyMap<string, EventSchema>;
  private readonly ids = new Map<string, Promise<number>>();
  private readonly writers = new Map<number, Promise<Type>>();
  private readonly resolutions = new Map<string, Resolution>();

  constructor(
    private readonly registry: SchemaRegistry,
    /** Reader/writer schemas keyed by subject; the bundled event schemas by default. */
    schemas: ReadonlyMap<string, EventSchema> = loadEventSchemas(),
  ) {
    this.schemas = schemas;
  }

  async encode<S extends string>(
    subject: S,
    value: S extends keyof EventBySubject ? EventBySubject[S] : unknown,
  ): Promise<Buffer> {
    const schema = this.schema(subject);
    const problems: string[] = [];
    const valid = schema.type.isValid(value, {
      errorHook: (path, got) => {
        problems.push(`${path.join('.') || '(value)'} (got ${got === null ? 'null' : typeof got})`);
      },
    });
    if (!valid) throw new Error(`cannot encode ${subject}: invalid ${problems.join(', ')}`);
    const id = await this.idFor(schema);
    const body = schema.type.toBuffer(value);
    const buf = Buffer.allocUnsafe(HEADER_LENGTH + body.length);
    buf.writeUInt8(MAGIC_BYTE, 0);
    buf.writeInt32BE(id, 1);
    body.copy(buf, HEADER_LENGTH);
    return buf;
  }

  /** Throws EventDecodeError for any undecodable input, including a null (tombstone) value. */
  async decode<T>(buf: Buffer | null, readerSubject: string): Promise<T> {
    const reader = this.schema(readerSubject);
    if (buf === null || buf.length === 0) {
      throw new EventDecodeError('too_short', 'empty record value');
    }
    if (buf[0] !== MAGIC_BYTE) {
      throw new EventDecodeError('bad_magic', `first byte is ${buf[0]}, not the wire format's magic byte 0`);
    }
    if (buf.length < HEADER_LENGTH) {
      throw new EventDecodeError('too_short', `${buf.length} bytes, shorter than the 5-byte header`);
    }
    const id = buf.readInt32BE(1);
    const resolver = await this.resolverFor(id, reader);
    let decoded: { value: unknown; offset: number };
    try {
      decoded = reader.type.decode(buf, HEADER_LENGTH, resolver);
    } catch (err) {
      throw new EventDecodeError('bad_avro', `invalid Avro body: ${(err as Error).message}`, id, {
        cause: err,
      });
    }
    if (decoded.offset < 0) {
      throw new EventDecodeError('bad_avro', 'Avro body is truncated', id);
    }
    if (decoded.offset !== buf.length) {
      throw new EventDecodeError('bad_avro', `${buf.length - decoded.offset} trailing bytes after the Avro body`, id);
    }
    return decoded.value as T;
  }

  private schema(subject: string): EventSchema {
    const schema = this.schemas.get(subject);
    if (!schema) throw new Error(`no local schema for subject ${subject}`);
    return schema;
  }

  private idFor(schema: EventSchema): Promise<number> {
    let id = this.ids.get(schema.subject);
    if (!id) {
      id = this.registry.register(schema.subject, schema.canonical);
      this.ids.set(schema.subject, id);
      id.catch(() => this.ids.delete(schema.subject));
    }
    return id;
  }

  private async resolverFor(id: number, reader: EventSchema): Promise<Resolver | undefined> {
    const key = `${id}\n${reader.subject}`;
    let resolution = this.resolutions.get(key);
    if (!resolution) {
      const writer = await this.writerFor(id);
      if (writer.equals(reader.type)) {
        resolution = { resolver: undefined };
      } else {
        try {
          resolution = { resolver: reader.type.createResolver(writer) };
        } catch (err) {
          resolution = { incompatible: (err as Error).message };
        }
      }
      this.resolutions.set(key, resolution);
    }
    if ('incompatible' in resolution) {
      throw new EventDecodeError(
        'unknown_schema',
        `writer schema id ${id} cannot be read as ${reader.subject}: ${resolution.incompatible}`,
        id,
      );
    }
    return resolution.resolver;
  }

  private writerFor(id: number): Promise<Type> {
    let writer = this.writers.get(id);
    if (!writer) {
      writer = this.fetchWriter(id);
      this.writers.set(id, writer);
      writer.catch(() => this.writers.delete(id));
    }
    return writer;
  }

  private async fetchWriter(id: number): Promise<Type> {
    if (id <= 0) throw new EventDecodeError('unknown_schema', `schema id ${id} is not a valid registry id`, id);
    let text: string;
    try {
      text = await this.registry.schemaById(id);
    } catch (err) {
      if (err instanceof SchemaNotFoundError) {
        throw new EventDecodeError('unknown_schema', `schema id ${id} is not registered`, id, { cause: err });
      }
      throw err;
    }
    try {
      return parseSchema(text);
    } catch (err) {
      throw new EventDecodeError('unknown_schema', `schema id ${id} is unusable: ${(err as Error).message}`, id, {
        cause: err,
      });
    }
  }
}
