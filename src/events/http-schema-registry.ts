import { CachingSchemaRegistry, isSchemaId, SchemaNotFoundError, SchemaRegistryError } from './schema-registry.js';

export interface HttpSchemaRegistryOptions {
  /** Per request, including reading the response body. Default 5000. */
  timeoutMs?: number;
}

const CONTENT_TYPE = 'application/vnd.schemaregistry.v1+json';
/** Confluent's error_code for "schema not found". */
const SCHEMA_NOT_FOUND = 40403;
/** Levels under which the registry refuses a new schema that cannot read the subject's older data. */
const BACKWARD_LEVELS: ReadonlySet<unknown> = new Set(['BACKWARD', 'BACKWARD_TRANSITIVE', 'FULL', 'FULL_TRANSITIVE']);

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

  protected async registerUncached(subject: string, schemaJson: string): Promise<number> {
    await this.requireBackwardCompatibility(subject);
    const path = `/subjects/${encodeURIComponent(subject)}/versions`;
    const body = await this.request('POST', path, { schema: schemaJson });
    const value = (body as { id?: unknown } | null)?.id;
    if (typeof value !== 'number' || !isSchemaId(value)) {
      throw new SchemaRegistryError(`registering ${subject}: response has no valid id`, false);
    }
    return value;
  }

  /**
   * Records written with older schemas stay in the topics, so the registry must refuse a schema
   * (Sluice's or another producer's) that cannot read them. A level the operator set that already
   * implies BACKWARD (including a stricter one) is left alone; otherwise the subject gets BACKWARD.
   * Registries that ignore `defaultToGlobal` answer 404 for a subject without a level of its own.
   */
  private async requireBackwardCompatibility(subject: string): Promise<void> {
    const path = `/config/${encodeURIComponent(subject)}`;
    const level = await this.request('GET', `${path}?defaultToGlobal=true`).then(
      (body) => (body as { compatibilityLevel?: unknown } | null)?.compatibilityLevel,
      (err: unknown) => {
        if (err instanceof HttpStatusError && err.status === 404) return undefined;
        throw err;
      },
    );
    if (!BACKWARD_LEVELS.has(level)) await this.request('PUT', path, { compatibility: 'BACKWARD' });
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

  private async request(method: 'GET' | 'POST' | 'PUT', path: string, body?: unknown): Promise<unknown> {
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
