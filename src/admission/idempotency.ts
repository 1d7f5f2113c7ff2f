import { createHash, randomUUID } from 'node:crypto';
import type { RedisKeys } from '../redis/keys.js';
import type { LuaScripts } from '../redis/scripts.js';
import { canonicalJson } from '../util/canonical-json.js';

export { IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_RULE } from '../client/types.js';

/** A stored answer: what the first request with this key got. */
export interface StoredAnswer {
  status: number;
  body: unknown;
  headers: Record<string, string>;
}

export type IdempotencyClaim =
  | { kind: 'claimed'; token: string }
  | { kind: 'replay'; answer: StoredAnswer }
  | { kind: 'conflict' }
  | { kind: 'in_progress' };

export interface IdempotencyOptions {
  ttlSec: number;
  /** Lease of a claim: a claimant that crashed frees the key after this. */
  pendingMs: number;
  /** How long a duplicate waits for the first request's answer before giving up. */
  waitMs: number;
  pollMs?: number;
  /**
   * Keeps these keys apart from other callers' keys of the same tenant (the Kafka ingress's from
   * HTTP's): the scope and a zero byte go before the key into its digest, and an HTTP key holds no
   * zero byte. Absent: HTTP's keys, digested as they always were.
   */
  scope?: string;
}

/** Stands for the input while the rest of the body is serialized; no other member can contain it. */
const INPUT_SLOT = '\u0000sluice:input\u0000';

/**
 * Same body, same fingerprint: key order in the JSON does not matter. The fingerprint is the hash
 * of `canonicalJson({ workflow, body })`, as it always was (records stored before stay comparable),
 * with the input spliced in as the canonical text the caller already serialized once, bounded.
 * The other members are a configured workflow name, a class and an integer: they cannot hold the slot.
 */
export function requestFingerprint(workflow: string, body: object, canonicalInput: string): string {
  const parts = canonicalJson({ workflow, body: { ...body, input: INPUT_SLOT } }).split(JSON.stringify(INPUT_SLOT));
  if (parts.length !== 2) throw new Error('the request body must hold the input slot exactly once');
  return createHash('sha256').update(parts[0]!).update(canonicalInput).update(parts[1]!).digest('hex');
}


/**
 * Idempotency-Key records in Redis (24 h by default), shared by every API instance. The first
 * request claims the key; duplicates that arrive meanwhile wait (bounded) for its answer instead of
 * producing a second event; the answer is stored only for accepted runs, so a refusal may be retried.
 */
export class IdempotencyStore {
  constructor(
    private readonly scripts: LuaScripts,
    private readonly keys: RedisKeys,
    private readonly opts: IdempotencyOptions,
  ) {}

  private redisKey(tenant: string, key: string): string {
    const digest = createHash('sha256');
    if (this.opts.scope !== undefined) digest.update(this.opts.scope).update('\u0000');
    return this.keys.idempotency(tenant, digest.update(key).digest('hex'));
  }

  /**
   * `token` fences the claim: only its holder settles it, and a holder claiming again while it is
   * pending gets it back (the ingress passes its record's coordinates, so a record read again after
   * a failure claims its key again, and keeps the token in its answer to settle each re-offer).
   */
  async claim(tenant: string, key: string, fingerprint: string, token: string = randomUUID()): Promise<IdempotencyClaim> {
    const redisKey = this.redisKey(tenant, key);
    const until = Date.now() + this.opts.waitMs;
    for (;;) {
      const res = (await this.scripts.run('idempotencyClaim', [redisKey], [fingerprint, token, this.opts.pendingMs])) as string[];
      switch (res[0]) {
        case 'claimed':
          return { kind: 'claimed', token };
        case 'conflict':
          return { kind: 'conflict' };
        case 'done':
          return { kind: 'replay', answer: JSON.parse(res[2]!) as StoredAnswer };
      }
      if (Date.now() >= until) return { kind: 'in_progress' };
      await new Promise((r) => setTimeout(r, this.opts.pollMs ?? 25));
    }
  }

  /**
   * False when the claim had expired and another request took the key: nothing was stored. The
   * holder of the token may store again (a newer answer replaces the older); `keepMs` keeps it
   * longer than `ttlSec` (a deferred run's answer, until past its deadline).
   */
  async store(tenant: string, key: string, token: string, answer: StoredAnswer, keepMs: number = this.opts.ttlSec * 1000): Promise<boolean> {
    return (await this.scripts.run('idempotencySettle', [this.redisKey(tenant, key)], [token, 'store', answer.status, JSON.stringify(answer), Math.max(keepMs, this.opts.ttlSec * 1000)])) === 1;
  }

  /** The answer stored under the key, read without claiming it; undefined while none is stored. */
  async answer(tenant: string, key: string): Promise<StoredAnswer | undefined> {
    const res = (await this.scripts.run('idempotencyAnswer', [this.redisKey(tenant, key)], [])) as [string, string] | null;
    return res ? (JSON.parse(res[1]) as StoredAnswer) : undefined;
  }

  async forget(tenant: string, key: string, token: string): Promise<boolean> {
    return (await this.scripts.run('idempotencySettle', [this.redisKey(tenant, key)], [token, 'forget', 0, '', 0])) === 1;
  }
}
