import { RUN_ID_PATTERN } from '../runs/run-id.js';

/**
 * The time, id and filter parameters of the API's routes, as JSON Schema fragments that every route
 * uses at its boundary: a value that passes reaches Postgres as something it stores, so a wrong
 * one is `400 invalid_request` naming the parameter, never a database error.
 */

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(?:[Zz]|([+-])(\d{2}):(\d{2}))$/;

const daysIn = (year: number, month: number) => new Date(Date.UTC(year, month, 0)).getUTCDate();

/**
 * Whether `text` is an RFC 3339 date-time naming one instant: a real calendar day, no leap second
 * (JavaScript's and Postgres's clocks have none: `Date.parse` answers NaN for `23:59:60`, which
 * Postgres then refuses), an offset within a day.
 */
export function isInstant(text: string): boolean {
  const m = RFC3339.exec(text);
  if (!m) return false;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const offsetOk = m[8] === undefined || (Number(m[9]) <= 23 && Number(m[10]) <= 59);
  return month >= 1 && month <= 12 && day >= 1 && day <= daysIn(year, month) && hour <= 23 && minute <= 59 && second <= 59 && offsetOk && Number.isFinite(Date.parse(text));
}

const MAX_BIGINT = 2n ** 63n - 1n;

/** Whether `text` is a dead letter's id as Postgres keeps it: a positive `bigint` in decimal. */
export function isDeadLetterId(text: string): boolean {
  return /^[1-9]\d{0,18}$/.test(text) && BigInt(text) <= MAX_BIGINT;
}

/** The formats the fragments below name, for the server's Ajv (`ajv.customOptions.formats`). */
export const PARAM_FORMATS = { instant: isInstant, 'dead-letter-id': isDeadLetterId } as const;

export const INSTANT = { type: 'string', format: 'instant' } as const;
export const DEAD_LETTER_ID = { type: 'string', format: 'dead-letter-id' } as const;
export const RUN_ID = { type: 'string', pattern: RUN_ID_PATTERN.source } as const;
/** A tenant, workflow or reason to filter by: any text Postgres can compare (none holds NUL). */
export const FILTER_TEXT = { type: 'string', minLength: 1, maxLength: 200, pattern: '^[^\\u0000]*$' } as const;

/** `:id` paths of one run, and of one dead letter. */
export const RUN_ID_PARAMS = { type: 'object', required: ['id'], properties: { id: RUN_ID } } as const;
export const DEAD_LETTER_ID_PARAMS = { type: 'object', required: ['id'], properties: { id: DEAD_LETTER_ID } } as const;
