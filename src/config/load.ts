import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { configSchema, type SluiceConfig } from './schema.js';
import { isRecord } from '../util/is-record.js';
import { packageRoot } from '../util/package-root.js';

/** A configuration that cannot be used; the message names every offending field. */
export class ConfigError extends Error {
  constructor(
    message: string,
    readonly fields: string[],
  ) {
    super(message);
    this.name = 'ConfigError';
  }
}

type EnvOverride = { env: string; path: string[]; parse: (raw: string) => unknown };

const list = (raw: string) => raw.split(',').map((s) => s.trim()).filter(Boolean);
const int = (raw: string) => (/^-?\d+$/.test(raw.trim()) ? Number(raw) : raw);
const text = (raw: string) => raw;

/** Environment variables win over the file; each maps to exactly one field. */
export const ENV_OVERRIDES: readonly EnvOverride[] = [
  { env: 'KAFKA_BROKERS', path: ['kafka', 'brokers'], parse: list },
  { env: 'SLUICE_NAMESPACE', path: ['namespace'], parse: text },
  { env: 'REDIS_URL', path: ['redis', 'url'], parse: text },
  { env: 'REDIS_CLUSTER', path: ['redis', 'cluster'], parse: list },
  { env: 'DATABASE_URL', path: ['postgres', 'url'], parse: text },
  { env: 'SCHEMA_REGISTRY_URL', path: ['schemaRegistry', 'url'], parse: text },
  { env: 'ANTHROPIC_API_KEY', path: ['anthropic', 'apiKey'], parse: text },
  { env: 'ANTHROPIC_BASE_URL', path: ['anthropic', 'baseUrl'], parse: text },
  { env: 'SLUICE_ROLES', path: ['roles'], parse: list },
  { env: 'SLUICE_INSTANCE_ID', path: ['instanceId'], parse: text },
  { env: 'SLUICE_LOG_LEVEL', path: ['logLevel'], parse: text },
  { env: 'SLUICE_STATE_DIR', path: ['stateDir'], parse: text },
  { env: 'SLUICE_API_HOST', path: ['api', 'host'], parse: text },
  { env: 'SLUICE_API_PORT', path: ['api', 'port'], parse: int },
  { env: 'SLUICE_SIM_HOST', path: ['simulator', 'host'], parse: text },
  { env: 'SLUICE_SIM_PORT', path: ['simulator', 'port'], parse: int },
  { env: 'SLUICE_OPS_PORT', path: ['opsPort'], parse: int },
  { env: 'SLUICE_PROFILE', path: ['profile'], parse: text },
];

export function defaultConfigPath(): string {
  return join(packageRoot(), 'config', 'local.yaml');
}

function setPath(target: Record<string, unknown>, path: string[], value: unknown): void {
  let node = target;
  for (const key of path.slice(0, -1)) {
    const next = node[key];
    if (typeof next !== 'object' || next === null || Array.isArray(next)) node[key] = {};
    node = node[key] as Record<string, unknown>;
  }
  node[path[path.length - 1]!] = value;
}

/** Validates a raw document (already merged with env overrides) into a typed config. */
export function parseConfig(raw: unknown, env: NodeJS.ProcessEnv = {}, source = 'config'): SluiceConfig {
  if (raw !== undefined && raw !== null && (typeof raw !== 'object' || Array.isArray(raw))) {
    throw new ConfigError(`${source}: the top level must be a mapping`, ['(root)']);
  }
  const doc: Record<string, unknown> = raw ? structuredClone(raw as Record<string, unknown>) : {};
  const fromEnv = new Map<string, string>();
  for (const o of ENV_OVERRIDES) {
    const value = env[o.env];
    if (value === undefined || value === '') continue;
    setPath(doc, o.path, o.parse(value));
    fromEnv.set(o.path.join('.'), o.env);
  }
  const result = configSchema.safeParse(doc);
  if (result.success) return result.data;
  const fields: string[] = [];
  const lines = result.error.issues.map((issue) => {
    const field = issue.path.map(String).join('.') || '(root)';
    fields.push(field);
    // A list from one variable (KAFKA_BROKERS) fails per item: name the variable for those too.
    const envName = [...fromEnv].find(([path]) => field === path || field.startsWith(`${path}.`))?.[1];
    return `  ${field}${envName ? ` (from ${envName})` : ''}: ${issue.message}`;
  });
  throw new ConfigError(`invalid configuration in ${source}:\n${lines.join('\n')}`, fields);
}

/** Reads the YAML file (SLUICE_CONFIG, else the built-in config/local.yaml) and applies env overrides. */
export function loadConfig(opts: { path?: string; env?: NodeJS.ProcessEnv } = {}): SluiceConfig {
  const env = opts.env ?? process.env;
  const given = opts.path ?? env.SLUICE_CONFIG;
  const path = given ? (isAbsolute(given) ? given : resolve(given)) : defaultConfigPath();
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read config file ${path}: ${(err as Error).message}`, ['(file)']);
  }
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (err) {
    throw new ConfigError(`config file ${path} is not valid YAML: ${(err as Error).message}`, ['(file)']);
  }
  return parseConfig(withSecretFilesFrom(dirname(path), raw), env, path);
}

/** The built-in config/local.yaml as a document, for tools that write configs of their own from it. */
export function builtInConfigDocument(): Record<string, any> {
  const path = defaultConfigPath();
  return withSecretFilesFrom(dirname(path), parseYaml(readFileSync(path, 'utf8'))) as Record<string, any>;
}

/**
 * A relative `tenants.<id>.ingress.secretFile` is read from the config file's folder, wherever
 * Sluice starts (the built-in config's demo secret lies beside it); the document is not changed.
 */
function withSecretFilesFrom(dir: string, raw: unknown): unknown {
  if (!isRecord(raw) || !isRecord(raw.tenants)) return raw;
  const tenants = Object.fromEntries(
    Object.entries(raw.tenants).map(([id, tenant]) => {
      const file = isRecord(tenant) && isRecord(tenant.ingress) ? tenant.ingress.secretFile : undefined;
      if (typeof file !== 'string' || file === '' || isAbsolute(file)) return [id, tenant];
      const t = tenant as Record<string, Record<string, unknown>>;
      return [id, { ...t, ingress: { ...t.ingress, secretFile: resolve(dir, file) } }];
    }),
  );
  return { ...raw, tenants };
}
