import { randomFillSync } from 'node:crypto';

/** Refilled whole when used up: one CSPRNG call per 512 run ids instead of one per id (as Node's randomUUID does). */
const POOL_BYTES = 8 * 1024;
const pool = Buffer.alloc(POOL_BYTES);
let offset = POOL_BYTES;

/**
 * `n` cryptographically random bytes, like `crypto.randomBytes(n)`, served from a pool filled
 * ahead: each request's run id and trace ids would otherwise cost a call into OpenSSL each.
 * Every byte is handed out once; the result is a copy, so the pool's refill never changes it.
 */
export function pooledRandomBytes(n: number): Buffer {
  if (n > POOL_BYTES) return randomFillSync(Buffer.alloc(n));
  if (offset + n > POOL_BYTES) {
    randomFillSync(pool);
    offset = 0;
  }
  const bytes = Buffer.from(pool.subarray(offset, offset + n));
  offset += n;
  return bytes;
}
