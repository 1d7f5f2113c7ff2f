/** How many console logins one client address may try: `attempts` at once, refilled over `perSec`. */
export interface LoginRateLimit {
  attempts: number;
  perSec: number;
  /** Addresses remembered at most; beyond it the one seen least recently is forgotten. */
  maxAddresses: number;
}

interface Bucket {
  tokens: number;
  at: number;
}

/**
 * A token bucket per client address for the console's login, in this process's memory: guessing
 * the admin key is slowed to `attempts` per `perSec` per address, whatever the answer. Bounded: a
 * Map keeps insertion order, so re-inserting on each attempt makes its first entry the address
 * seen least recently, and that is the one dropped when the map is full.
 */
export class LoginThrottle {
  private readonly buckets = new Map<string, Bucket>();

  constructor(
    private readonly limit: LoginRateLimit,
    private readonly now: () => number = Date.now,
  ) {}

  /** Takes one attempt for `address`: allowed, or refused with the seconds until the next one is. */
  take(address: string): { allowed: true } | { allowed: false; retryAfterSec: number } {
    const now = this.now();
    const ratePerMs = this.limit.attempts / (this.limit.perSec * 1000);
    const prev = this.buckets.get(address);
    const tokens = prev ? Math.min(this.limit.attempts, prev.tokens + (now - prev.at) * ratePerMs) : this.limit.attempts;
    this.buckets.delete(address);
    if (tokens < 1) {
      this.buckets.set(address, { tokens, at: now });
      return { allowed: false, retryAfterSec: Math.max(1, Math.ceil((1 - tokens) / ratePerMs / 1000)) };
    }
    this.buckets.set(address, { tokens: tokens - 1, at: now });
    if (this.buckets.size > this.limit.maxAddresses) this.buckets.delete(this.buckets.keys().next().value!);
    return { allowed: true };
  }

  /** Addresses remembered now. */
  get size(): number {
    return this.buckets.size;
  }
}
