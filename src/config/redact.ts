import { REDACTED, redactUrl } from '../util/url.js';
import type { SluiceConfig } from './schema.js';

/** Fields that are a secret outright. */
const SECRET_FIELDS = new Set(['apiKey']);
/** Fields holding a URL, which may carry a password (Redis, Postgres, schema registry, tools…). */
const URL_FIELD = /^(url|[a-z]\w*Url)$/;

function redactField(key: string, value: unknown): unknown {
  if (typeof value === 'string') {
    if (SECRET_FIELDS.has(key)) return REDACTED;
    // A tool on a simulator path ("/tools/x") is a path, not a URL.
    if (URL_FIELD.test(key) && !value.startsWith('/')) return redactUrl(value);
    return value;
  }
  if (Array.isArray(value)) return value.map((v) => redactField('', v));
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redactField(k, v)]));
  return value;
}

/**
 * The config as it may be shown (`sluice config`, the start banner): the API key replaced, and
 * the password of every URL, whatever section it is in, so a field added later is covered too.
 */
export function redactConfig(config: SluiceConfig): SluiceConfig {
  return redactField('', config) as SluiceConfig;
}
