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

export const MAX_INT32 = 0x7fffffff;

export function isSchemaId(id: number): boolean {
  return Number.isInteger(id) && id > 0 && id <= MAX_INT32;
}

/**
 * Both registries answer from memory after the first success; a failed lookup is forgotten so
 * the next call asks again.
 */
export abstract class CachingSchemaRegistry implements SchemaRegistry {
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
