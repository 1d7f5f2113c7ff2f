/** Reads one response header by name, case-insensitively; fetch's `Headers.get` is one. */
export type HeaderReader = (name: string) => string | null | undefined;

/** A reader over a plain header record (node:http's, or a test's), whatever the case of its names. */
export function headerReader(headers: Readonly<Record<string, string | readonly string[] | undefined>>): HeaderReader {
  const byName = new Map<string, string>();
  for (const [name, value] of Object.entries(headers)) {
    const first = typeof value === 'string' ? value : value?.[0];
    if (first !== undefined) byName.set(name.toLowerCase(), first);
  }
  return (name) => byName.get(name.toLowerCase());
}

/** RFC 9110 delay-seconds, with a fraction tolerated. */
const SECONDS = /^\d+(\.\d+)?$/;
const COUNT = /^\d+$/;
/** RFC 3339 date-time, as Anthropic's `-reset` headers carry. */
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;
/** RFC 9110 IMF-fixdate (the HTTP-date senders must use), e.g. `Tue, 01 Dec 2026 03:00:00 GMT`. */
const HTTP_DATE = /^[A-Za-z]{3}, \d{2} [A-Za-z]{3} \d{4} \d{2}:\d{2}:\d{2} GMT$/;

/**
 * The ms a `retry-after` value asks the caller to wait from `now`: delay-seconds or an HTTP date
 * (one already past is 0). Undefined when absent or not one of those.
 */
export function retryAfterMs(value: string | null | undefined, now: number): number | undefined {
  const v = value?.trim();
  if (!v) return undefined;
  if (SECONDS.test(v)) return Math.round(Number(v) * 1000);
  if (!HTTP_DATE.test(v)) return undefined;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/** The limits Anthropic reports in `anthropic-ratelimit-<kind>-{limit,remaining,reset}`; `tokens` is the most restrictive token limit in effect. */
export const PROVIDER_LIMIT_KINDS = ['requests', 'tokens', 'input_tokens', 'output_tokens'] as const;
export type ProviderLimitKind = (typeof PROVIDER_LIMIT_KINDS)[number];

/** What one response said of the provider's rate limits. */
export interface ProviderRateLimits {
  /** Per-minute limits reported (positive integers only). */
  limits: Partial<Record<ProviderLimitKind, number>>;
  /** Units each limit reported left after this response (non-negative integers only). */
  remaining: Partial<Record<ProviderLimitKind, number>>;
  /**
   * When calls may go again (epoch ms): the latest of when a limit reported used up (remaining 0)
   * has one unit back, and the end of a 429's retry-after. Absent when neither is in the future.
   */
  notBefore?: number;
}

function positiveCount(value: string | null | undefined): number | undefined {
  const v = value?.trim();
  if (!v || !COUNT.test(v)) return undefined;
  const n = Number(v);
  return Number.isSafeInteger(n) && n > 0 ? n : undefined;
}

function rfc3339(value: string | null | undefined): number | undefined {
  const v = value?.trim();
  if (!v || !RFC3339.test(v)) return undefined;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : at;
}

/**
 * Anthropic's rate-limit headers of one response (a success or an error), read at `now`. Anything
 * absent or malformed is left out, so the configured limits apply as if it had not been sent.
 * `status` is the response's: only a 429's `retry-after` says the limit, not an overload, holds calls.
 */
export function anthropicRateLimits(header: HeaderReader, status: number | undefined, now: number): ProviderRateLimits {
  const limits: ProviderRateLimits['limits'] = {};
  const left: ProviderRateLimits['remaining'] = {};
  let notBefore: number | undefined;
  const later = (at: number) => {
    if (at > now && (notBefore === undefined || at > notBefore)) notBefore = at;
  };
  for (const kind of PROVIDER_LIMIT_KINDS) {
    const prefix = `anthropic-ratelimit-${kind.replace('_', '-')}`;
    const limit = positiveCount(header(`${prefix}-limit`));
    if (limit !== undefined) limits[kind] = limit;
    const remaining = header(`${prefix}-remaining`)?.trim();
    if (remaining !== undefined && COUNT.test(remaining) && Number.isSafeInteger(Number(remaining))) left[kind] = Number(remaining);
    const reset = rfc3339(header(`${prefix}-reset`));
    // The reset is when the limit is full again; it refills continuously, so one unit is back after
    // a limit's share of that time. Without the limit the whole time is all that is known.
    if (remaining === '0' && reset !== undefined && reset > now) later(limit === undefined ? reset : now + Math.ceil((reset - now) / limit));
  }
  if (status === 429) {
    const wait = retryAfterMs(header('retry-after'), now);
    if (wait !== undefined) later(now + wait);
  }
  return notBefore === undefined ? { limits, remaining: left } : { limits, remaining: left, notBefore };
}
