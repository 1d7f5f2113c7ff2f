/**
 * Fault profiles of the provider simulator: what the admin API accepts, what the
 * `X-Simulate-Failure` request header means, and the pure decision of one call's outcome.
 */

/** The fault target of the Messages API; every other target is a tool. */
export const ANTHROPIC_TARGET = 'anthropic';

export const SIM_ERROR_STATUSES = [429, 500, 529] as const;
export type SimErrorStatus = (typeof SIM_ERROR_STATUSES)[number];

export interface FaultProfile {
  latencyMs: number;
  /** Extra delay drawn uniformly from the whole milliseconds 0..jitterMs. */
  jitterMs: number;
  errorStatus?: SimErrorStatus;
  /** Share of calls (0..1) answered with errorStatus. */
  errorRate: number;
  retryAfterSec?: number;
  hang: boolean;
  /** The provider's own limits; absent means unlimited. Not a fault roll: see rate-limit.ts. */
  rateLimit?: RateLimit;
  /**
   * The anthropic target only, answers that break its word: text padded or cut to this many
   * bytes whatever `max_tokens` allowed, and a `usage.output_tokens` reported whatever the answer
   * holds (a provider, or a proxy before one, that is broken or hostile).
   */
  answerBytes?: number;
  reportedOutputTokens?: number;
}

/**
 * Continuously refilled limits. The anthropic target takes the Messages API's three per-minute
 * limits; a tool takes one request limit, per second or per minute.
 */
export interface RateLimit {
  requestsPerMinute?: number;
  requestsPerSecond?: number;
  inputTokensPerMinute?: number;
  outputTokensPerMinute?: number;
}

export const ZERO_PROFILE: Readonly<FaultProfile> = Object.freeze({ latencyMs: 0, jitterMs: 0, errorRate: 0, hang: false });

export type CallOutcome =
  | { kind: 'ok'; delayMs: number }
  | { kind: 'error'; status: SimErrorStatus; delayMs: number; retryAfterSec?: number }
  | { kind: 'hang' };

export interface FieldError {
  field: string;
  message: string;
}

/** Only the fields the caller set; the rest come from the target's baseline. `rateLimit: null` clears it. */
export type FaultPatch = Partial<Omit<FaultProfile, 'rateLimit'>> & { rateLimit?: RateLimit | null };

export interface FaultUpdate {
  target: string;
  patch: FaultPatch;
}

export type FaultUpdateResult = { ok: true; value: FaultUpdate } | { ok: false; errors: FieldError[] };
export type SimulateFailureResult = { ok: true; value: FaultProfile } | { ok: false; message: string };

/** Upper bounds keep a typo (an extra zero) from wedging a benchmark for hours. */
export const MAX_LATENCY_MS = 600_000;
export const MAX_RETRY_AFTER_SEC = 3_600;
/** Anthropic sends a retry-after on every 429; callers rely on it, so the sim does too. */
export const DEFAULT_RATE_LIMIT_RETRY_AFTER_SEC = 1;
/**
 * Bounds of a limit, per minute or per second. Below 1 a bucket could never hold one request, so
 * nothing would pass (a tool's half a request per second is 30 per minute); the top is far above
 * any real provider tier and keeps the bucket arithmetic exact.
 */
export const MIN_RATE_LIMIT = 1;
export const MAX_RATE_LIMIT = 1_000_000_000;
/** The answer was 64 MiB; more only slows the simulator down. */
export const MAX_ANSWER_BYTES = 64 * 1024 * 1024;
export const MAX_REPORTED_OUTPUT_TOKENS = 1_000_000_000;

const UPDATE_FIELDS = new Set(['target', 'latencyMs', 'jitterMs', 'errorStatus', 'errorRate', 'retryAfterSec', 'hang', 'rateLimit', 'answerBytes', 'reportedOutputTokens']);
const ANSWER_FIELDS = ['answerBytes', 'reportedOutputTokens'] as const;
const ANTHROPIC_LIMITS = ['requestsPerMinute', 'inputTokensPerMinute', 'outputTokensPerMinute'] as const;
const TOOL_LIMITS = ['requestsPerSecond', 'requestsPerMinute'] as const;
const RATE_LIMIT_FIELDS: readonly (keyof RateLimit)[] = ['requestsPerMinute', 'requestsPerSecond', 'inputTokensPerMinute', 'outputTokensPerMinute'];

function isSimErrorStatus(value: unknown): value is SimErrorStatus {
  return SIM_ERROR_STATUSES.some((status) => status === value);
}

function isIntegerIn(value: unknown, max: number): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= max;
}

/** Validates a `PUT /admin/faults` body; every problem is reported, each naming its field. */
export function parseFaultUpdate(body: unknown, knownTargets: readonly string[]): FaultUpdateResult {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return { ok: false, errors: [{ field: 'body', message: 'must be a JSON object' }] };
  }
  const input = body as Record<string, unknown>;
  const errors: FieldError[] = [];
  const patch: FaultPatch = {};
  const integerField = (field: 'latencyMs' | 'jitterMs' | 'retryAfterSec' | (typeof ANSWER_FIELDS)[number], max: number): void => {
    const value = input[field];
    if (value === undefined) return;
    if (isIntegerIn(value, max)) patch[field] = value;
    else errors.push({ field, message: `must be an integer between 0 and ${max}` });
  };

  for (const field of Object.keys(input)) {
    if (!UPDATE_FIELDS.has(field)) errors.push({ field, message: 'is not a known field' });
  }
  const target = input.target;
  if (typeof target !== 'string' || target === '') {
    errors.push({ field: 'target', message: 'is required and must be a non-empty string' });
  } else if (!knownTargets.includes(target)) {
    errors.push({ field: 'target', message: `must be one of: ${knownTargets.join(', ')}` });
  }
  integerField('latencyMs', MAX_LATENCY_MS);
  integerField('jitterMs', MAX_LATENCY_MS);
  integerField('retryAfterSec', MAX_RETRY_AFTER_SEC);
  integerField('answerBytes', MAX_ANSWER_BYTES);
  integerField('reportedOutputTokens', MAX_REPORTED_OUTPUT_TOKENS);
  for (const field of ANSWER_FIELDS) {
    if (input[field] !== undefined && typeof target === 'string' && target !== ANTHROPIC_TARGET && knownTargets.includes(target)) {
      errors.push({ field, message: `is a fault of the ${ANTHROPIC_TARGET} target only` });
    }
  }
  if (input.errorStatus !== undefined) {
    if (isSimErrorStatus(input.errorStatus)) patch.errorStatus = input.errorStatus;
    else errors.push({ field: 'errorStatus', message: `must be one of ${SIM_ERROR_STATUSES.join(', ')}` });
  }
  if (input.errorRate !== undefined) {
    const rate = input.errorRate;
    if (typeof rate === 'number' && rate >= 0 && rate <= 1) patch.errorRate = rate;
    else errors.push({ field: 'errorRate', message: 'must be a number between 0 and 1' });
  }
  if (input.hang !== undefined) {
    if (typeof input.hang === 'boolean') patch.hang = input.hang;
    else errors.push({ field: 'hang', message: 'must be a boolean' });
  }
  if (input.rateLimit !== undefined) {
    const known = typeof target === 'string' && knownTargets.includes(target) ? target : undefined;
    const parsed = parseRateLimit(input.rateLimit, known);
    if (parsed.ok) patch.rateLimit = parsed.value;
    else errors.push(...parsed.errors);
  }
  // An error status without a rate means "always"; a rate without a status would silently do nothing.
  if (input.errorStatus !== undefined && input.errorRate === undefined) patch.errorRate = 1;
  if (input.errorStatus === undefined && (patch.errorRate ?? 0) > 0) {
    errors.push({ field: 'errorStatus', message: 'is required when errorRate is above 0' });
  }

  if (errors.length > 0 || typeof target !== 'string') return { ok: false, errors };
  return { ok: true, value: { target, patch } };
}

/**
 * Validates a `rateLimit` value: null (no limits) or an object of positive limits that fit the
 * target. `target` is undefined when it is itself invalid; then only the values are checked.
 */
function parseRateLimit(value: unknown, target: string | undefined): { ok: true; value: RateLimit | null } | { ok: false; errors: FieldError[] } {
  if (value === null) return { ok: true, value: null };
  if (typeof value !== 'object' || Array.isArray(value)) {
    return { ok: false, errors: [{ field: 'rateLimit', message: 'must be an object of limits, or null to remove them' }] };
  }
  const input = value as Record<string, unknown>;
  const errors: FieldError[] = [];
  const limit: RateLimit = {};
  const fits: readonly string[] | undefined = target === undefined ? undefined : target === ANTHROPIC_TARGET ? ANTHROPIC_LIMITS : TOOL_LIMITS;
  for (const [field, amount] of Object.entries(input)) {
    const path = `rateLimit.${field}`;
    if (!(RATE_LIMIT_FIELDS as readonly string[]).includes(field)) {
      errors.push({ field: path, message: 'is not a known field' });
    } else if (fits !== undefined && !fits.includes(field)) {
      const message = target === ANTHROPIC_TARGET ? `is not a limit of the ${ANTHROPIC_TARGET} target (${ANTHROPIC_LIMITS.join(', ')})` : `is not a limit of a tool (${TOOL_LIMITS.join(' or ')})`;
      errors.push({ field: path, message });
    } else if (typeof amount !== 'number' || !Number.isFinite(amount) || amount < MIN_RATE_LIMIT || amount > MAX_RATE_LIMIT) {
      errors.push({ field: path, message: `must be a number from ${MIN_RATE_LIMIT} to ${MAX_RATE_LIMIT}` });
    } else {
      limit[field as keyof RateLimit] = amount;
    }
  }
  if (errors.length > 0) return { ok: false, errors };
  if (Object.keys(limit).length === 0) return { ok: false, errors: [{ field: 'rateLimit', message: 'must set at least one limit (null removes them)' }] };
  if (limit.requestsPerSecond !== undefined && limit.requestsPerMinute !== undefined) {
    return { ok: false, errors: [{ field: 'rateLimit', message: 'takes requestsPerSecond or requestsPerMinute, not both' }] };
  }
  return { ok: true, value: limit };
}

/** The profile a PUT sets: the baseline with the patch's fields over it. */
export function applyFaultPatch(baseline: FaultProfile, patch: FaultPatch): FaultProfile {
  const { rateLimit, ...faults } = patch;
  const { rateLimit: baselineLimit, ...baselineFaults } = baseline;
  const limit = rateLimit === undefined ? baselineLimit : (rateLimit ?? undefined);
  return { ...baselineFaults, ...faults, ...(limit !== undefined && { rateLimit: limit }) };
}

/**
 * Parses the `X-Simulate-Failure` header: comma-separated `429` | `500` | `529` | `hang` |
 * `slow=<ms>` | `retry-after=<sec>`. The result replaces the target's profile for that one
 * request, so only what the header names happens and no randomness is involved.
 */
export function parseSimulateFailure(header: string): SimulateFailureResult {
  const profile: FaultProfile = { ...ZERO_PROFILE };
  const seen = new Set<string>();
  for (const raw of header.split(',')) {
    const token = raw.trim().toLowerCase();
    const eq = token.indexOf('=');
    const name = eq < 0 ? token : token.slice(0, eq);
    const value = eq < 0 ? undefined : token.slice(eq + 1);
    const kind = isSimErrorStatus(Number(name)) && value === undefined ? 'status' : name;
    if (seen.has(kind)) return { ok: false, message: `"${kind}" given more than once` };
    seen.add(kind);
    if (kind === 'status' && value === undefined) {
      profile.errorStatus = Number(name) as SimErrorStatus;
      profile.errorRate = 1;
    } else if (kind === 'hang' && value === undefined) {
      profile.hang = true;
    } else if (kind === 'slow' || kind === 'retry-after') {
      const max = kind === 'slow' ? MAX_LATENCY_MS : MAX_RETRY_AFTER_SEC;
      const amount = value !== undefined && /^\d+$/.test(value) ? Number(value) : NaN;
      if (!isIntegerIn(amount, max)) return { ok: false, message: `"${kind}" needs an integer value between 0 and ${max}` };
      if (kind === 'slow') profile.latencyMs = amount;
      else profile.retryAfterSec = amount;
    } else {
      return { ok: false, message: `unknown token "${token}" (expected 429, 500, 529, hang, slow=<ms>, retry-after=<sec>)` };
    }
  }
  if (profile.hang && seen.size > 1) return { ok: false, message: '"hang" cannot be combined with other tokens' };
  if (profile.retryAfterSec !== undefined && profile.errorStatus === undefined) {
    return { ok: false, message: '"retry-after" needs an error status (429, 500 or 529)' };
  }
  return { ok: true, value: profile };
}

/**
 * Decides one call. `random` returns values in [0, 1); it is drawn only when the answer
 * depends on it: once for the error roll when 0 < errorRate < 1, then once for jitter when
 * jitterMs > 0.
 */
export function decideOutcome(profile: FaultProfile, override: FaultProfile | undefined, random: () => number): CallOutcome {
  const effective = override ?? profile;
  if (effective.hang) return { kind: 'hang' };
  const { errorStatus, errorRate, latencyMs, jitterMs } = effective;
  const fails = errorStatus !== undefined && (errorRate >= 1 || (errorRate > 0 && random() < errorRate));
  // The clamp keeps a misbehaving source that returns 1 inside the documented bound.
  const delayMs = latencyMs + (jitterMs > 0 ? Math.min(jitterMs, Math.floor(random() * (jitterMs + 1))) : 0);
  if (!fails) return { kind: 'ok', delayMs };
  const retryAfterSec = effective.retryAfterSec ?? (errorStatus === 429 ? DEFAULT_RATE_LIMIT_RETRY_AFTER_SEC : undefined);
  return retryAfterSec === undefined
    ? { kind: 'error', status: errorStatus, delayMs }
    : { kind: 'error', status: errorStatus, delayMs, retryAfterSec };
}
