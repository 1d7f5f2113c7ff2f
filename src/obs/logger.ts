import { pino, type DestinationStream, type Logger } from 'pino';
import { REDACTED, redactUrl } from '../util/url.js';

export type { Logger };

/** Fields that are a credential outright. */
const SECRET_FIELDS = ['apiKey', 'password', 'authorization', 'x-api-key'];
/** Fields holding a URL or connection string, logged with the password masked (a path is left alone). */
const URL_FIELDS = ['url', 'baseUrl', 'redisUrl', 'databaseUrl', 'connectionString'];
const urlFields = new Set(URL_FIELDS);

const key = (field: string) => (/^[A-Za-z_$][\w$]*$/.test(field) ? `.${field}` : `["${field}"]`);

/**
 * Where such fields sit in a log line, as deep as pino's paths reach: at the top, one level down
 * (`err.url`, `config.apiKey`), and in headers (`req.headers.authorization`).
 */
export const REDACT_PATHS: readonly string[] = [...SECRET_FIELDS, ...URL_FIELDS].flatMap((f) => [key(f).replace(/^\./, ''), `*${key(f)}`, `headers${key(f)}`, `*.headers${key(f)}`]);

function censor(value: unknown, path: string[]): unknown {
  if (urlFields.has(path[path.length - 1]!) && typeof value === 'string') return value.startsWith('/') ? value : redactUrl(value);
  return REDACTED;
}

function build(level: string, name: string, base: Record<string, unknown>, destination: DestinationStream | undefined): Logger {
  const options = { name, level, base: { pid: process.pid, ...base }, timestamp: pino.stdTimeFunctions.isoTime, redact: { paths: [...REDACT_PATHS], censor } };
  return destination ? pino(options, destination) : pino(options);
}

/** Structured JSON logs (stdout unless given another destination); one logger per process, children per role/component. */
export function createLogger(level: string = process.env.SLUICE_LOG_LEVEL ?? 'info', name = 'sluice', destination?: DestinationStream): Logger {
  return build(level, name, {}, destination);
}

/** What marks an audit line among the others on stdout: route it by this field to keep it. */
const AUDIT_STREAM = 'audit';

/**
 * The audit trail: a logger of its own, at `info` whatever `logLevel` / `SLUICE_LOG_LEVEL` says (a
 * level chosen to quieten the logs must not also erase who changed what), every line carrying
 * `"stream": "audit"`. Stdout unless given another destination, beside the ordinary logs.
 */
export function createAuditLogger(destination?: DestinationStream): Logger {
  return build('info', 'sluice', { stream: AUDIT_STREAM }, destination);
}
