import { sha256Hex } from '../util/sha256-hex.js';

/** Who a key is: a tenant, the operator, or a scraper (`api.metricsKeySha256`), which may read `/metrics` only. */
export type Principal = { kind: 'tenant'; tenantId: string } | { kind: 'admin' } | { kind: 'metrics' };

/**
 * Keys are configured as SHA-256 digests only, so a leaked config does not leak keys; lookup
 * hashes the presented key and compares digests, which also makes the comparison constant-shape.
 */
export class KeyDirectory {
  private readonly byDigest = new Map<string, Principal>();

  constructor(cfg: { tenants: Readonly<Record<string, { apiKeySha256: string }>>; api: { adminKeySha256: string; metricsKeySha256?: string } }) {
    for (const [tenantId, t] of Object.entries(cfg.tenants)) this.byDigest.set(t.apiKeySha256, { kind: 'tenant', tenantId });
    this.byDigest.set(cfg.api.adminKeySha256, { kind: 'admin' });
    if (cfg.api.metricsKeySha256 !== undefined) this.byDigest.set(cfg.api.metricsKeySha256, { kind: 'metrics' });
  }

  /** The principal for an `Authorization` header value, or undefined when missing or unknown. */
  authenticate(authorization: string | undefined): Principal | undefined {
    const m = authorization ? /^Bearer\s+(\S{1,512})\s*$/i.exec(authorization) : null;
    return m ? this.principalOf(m[1]!) : undefined;
  }

  /** The principal of a bare key (the console's login form sends one), or undefined when unknown. */
  principalOf(key: string): Principal | undefined {
    return key.length > 0 && key.length <= 512 ? this.byDigest.get(sha256Hex(key)) : undefined;
  }
}
