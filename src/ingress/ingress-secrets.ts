import { ConfigError } from '../config/load.js';
import type { SluiceConfig } from '../config/schema.js';

/** Shorter secrets are refused: an HMAC key should hold at least 128 bits. */
export const MIN_SECRET_BYTES = 16;

export interface SecretSources {
  env: Readonly<Record<string, string | undefined>>;
  /** Reads a secret file; throws when it cannot. */
  readFile: (path: string) => Buffer;
}

/**
 * Each tenant's ingress secret, read once at start-up from where its config says
 * (`tenants.<id>.ingress.secretEnv` or `secretFile`). A file's one trailing newline is not part
 * of the secret (editors and `echo` add it). A tenant without `ingress` has no secret and cannot
 * submit through the ingress topic. Any secret that cannot be read, or is too short, stops the
 * start: a ConfigError naming every such field.
 */
export function readIngressSecrets(config: Pick<SluiceConfig, 'tenants'>, sources: SecretSources): Map<string, Buffer> {
  const secrets = new Map<string, Buffer>();
  const problems: { field: string; message: string }[] = [];
  for (const [tenantId, tenant] of Object.entries(config.tenants)) {
    const ingress = tenant.ingress;
    if (!ingress) continue;
    let field: string;
    let secret: Buffer | undefined;
    if (ingress.secretEnv !== undefined) {
      field = `tenants.${tenantId}.ingress.secretEnv`;
      const text = sources.env[ingress.secretEnv];
      if (text === undefined || text === '') problems.push({ field, message: `names ${ingress.secretEnv}, which is not set` });
      else secret = Buffer.from(text, 'utf8');
    } else {
      field = `tenants.${tenantId}.ingress.secretFile`;
      try {
        const bytes = sources.readFile(ingress.secretFile!);
        secret = bytes.at(-1) === 0x0a ? bytes.subarray(0, bytes.length - 1) : bytes;
      } catch (err) {
        problems.push({ field, message: `cannot be read: ${(err as Error).message}` });
      }
    }
    if (secret === undefined) continue;
    if (secret.length < MIN_SECRET_BYTES) problems.push({ field, message: `holds a secret of ${secret.length} bytes; use at least ${MIN_SECRET_BYTES} random bytes` });
    else secrets.set(tenantId, secret);
  }
  if (problems.length > 0) {
    throw new ConfigError(`ingress secrets:\n${problems.map((p) => `  ${p.field}: ${p.message}`).join('\n')}`, problems.map((p) => p.field));
  }
  return secrets;
}
