import { CachingSchemaRegistry, isSchemaId, SchemaNotFoundError, SchemaRegistryError } from './schema-registry.js';

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
