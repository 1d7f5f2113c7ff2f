import { isIPv6 } from 'node:net';
import type { FastifyRequest } from 'fastify';

/** How many failed authentications one client address may make: `attempts` at once, refilled over `perSec`. */
export interface AuthFailureLimit {
  attempts: number;
  perSec: number;
  /** Addresses remembered at most; beyond it the one that failed least recently is forgotten. */
  maxAddresses: number;
}

interface Bucket {
  tokens: number;
  at: number;
  /** The address is in a throttle that began when it spent its last attempt; over once the bucket is full again. */
  throttled: boolean;
}

/** The throttle as routes use it: asked before any key is looked at, told of each key that matched none. */
export interface FailedAuthentications {
  refusal(req: FastifyRequest): { retryAfterSec: number } | undefined;
  failed(req: FastifyRequest): void;
}

/** The eight 16-bit groups of an IPv6 address (a zone dropped, an IPv4 tail as two groups). */
function ipv6Groups(ip: string): number[] {
  let text = ip.split('%')[0]!;
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (v4) {
    const [a, b, c, d] = v4.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, v4.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.split('::') as [string, string | undefined];
  const front = head ? head.split(':') : [];
  const back = tail === undefined ? [] : tail ? tail.split(':') : [];
  const groups = tail === undefined ? front : [...front, ...Array<string>(8 - front.length - back.length).fill('0'), ...back];
  return groups.map((g) => Number.parseInt(g, 16));
}

/**
 * What the throttle counts by: an IPv4 address as is; an IPv6 one by its /64, the block a single
 * subscriber is given (counting each of its 2^64 addresses apart would give one attacker as many
 * buckets); an IPv4-mapped IPv6 address as the IPv4 address it is. Anything else (a proxy's
 * forwarded value that is not an address) as it was given.
 */
export function clientBlock(ip: string): string {
  if (!isIPv6(ip)) return ip;
  const g = ipv6Groups(ip);
  if (g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff) return [g[6]! >> 8, g[6]! & 0xff, g[7]! >> 8, g[7]! & 0xff].join('.');
  return `${g.slice(0, 4).map((x) => x.toString(16)).join(':')}::/64`;
}

/**
 * Failed authentications per client address (its block, `clientBlock`), in this process's memory:
 * a token bucket that only a failure spends, so an address that keeps presenting unknown keys is
 * slowed to `attempts` per `perSec`, while one that authenticates is never counted. Callers ask
 * `refusal` before looking at the key at all: a throttled address is refused whatever it presents,
 * its own valid key included, since an answer that depended on the key would keep the guessing
 * going (429 for a wrong key, 200 for the right one). Bounded: a Map keeps insertion order, so
 * re-inserting on each failure makes its first entry the address that failed least recently, and
 * that is the one dropped when the map is full.
 */
export class AuthFailureThrottle {
  private readonly buckets = new Map<string, Bucket>();

  constructor(
    private readonly limit: AuthFailureLimit,
    private readonly now: () => number = Date.now,
  ) {}

  /** Refused with the seconds until the address may try a key again, or undefined when it may now. */
  refusal(address: string): { retryAfterSec: number } | undefined {
    const bucket = this.buckets.get(clientBlock(address));
    if (!bucket) return undefined;
    const tokens = this.refilled(bucket);
    return tokens < 1 ? { retryAfterSec: Math.max(1, Math.ceil((1 - tokens) / this.ratePerMs() / 1000)) } : undefined;
  }

  /** Counts one failed authentication; true when it spent the address's last attempt and a throttle begins. */
  failed(address: string): boolean {
    const key = clientBlock(address);
    const prev = this.buckets.get(key);
    const tokens = (prev ? this.refilled(prev) : this.limit.attempts) - 1;
    // A bucket that filled up again ends the throttle it was in: the next one is a new episode.
    const wasThrottled = prev !== undefined && prev.throttled && tokens + 1 < this.limit.attempts;
    const throttled = wasThrottled || tokens < 1;
    this.buckets.delete(key);
    this.buckets.set(key, { tokens, at: this.now(), throttled });
    if (this.buckets.size > this.limit.maxAddresses) this.buckets.delete(this.buckets.keys().next().value!);
    return throttled && !wasThrottled;
  }

  /** Addresses remembered now. */
  get size(): number {
    return this.buckets.size;
  }

  private ratePerMs(): number {
    return this.limit.attempts / (this.limit.perSec * 1000);
  }

  private refilled(bucket: Bucket): number {
    return Math.min(this.limit.attempts, bucket.tokens + (this.now() - bucket.at) * this.ratePerMs());
  }
}
