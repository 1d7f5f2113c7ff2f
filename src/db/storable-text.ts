/**
 * Text as Postgres can store it. A JavaScript string may hold code points Postgres refuses, and
 * runs echo their caller's input into the read model, so any tenant could otherwise make a row
 * unwritable:
 * - `text` refuses U+0000 (SQLSTATE 22021);
 * - `jsonb` refuses the escape `\u0000` (22P05) and a lone surrogate escape such as `\ud800`
 *   (22P02), which JSON.stringify writes for a lone surrogate (an emoji cut in half by a
 *   length-limited slice is one).
 * Both become U+FFFD, the Unicode replacement character, here at the boundary: the rest of the
 * system keeps the caller's data as it came, and only the read model shows the substitute.
 */
export const REPLACEMENT_CHARACTER = '\uFFFD';

const UNSTORABLE_CODE_UNIT = /\0|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** The string with U+0000 and every lone surrogate replaced by U+FFFD; surrogate pairs are kept. */
export function storableText(text: string): string {
  return text.replace(UNSTORABLE_CODE_UNIT, REPLACEMENT_CHARACTER);
}

export function storableNullableText(text: string | null): string | null {
  return text === null ? null : storableText(text);
}

/** Every escape that may need repair contains this; JSON text without it is only checked for raw code units. */
const SUSPECT_ESCAPE = /\\u(?:0000|d[89a-f])/i;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const LETTER_U = 0x75;
const FOUR_HEX_DIGITS = /^[0-9a-fA-F]{4}$/;

/** The code unit a `\uXXXX` escape starting at `at` names, or undefined when it is not one. */
function escapedUnit(json: string, at: number): number | undefined {
  if (json.charCodeAt(at) !== BACKSLASH || json.charCodeAt(at + 1) !== LETTER_U) return undefined;
  const digits = json.slice(at + 2, at + 6);
  return FOUR_HEX_DIGITS.test(digits) ? Number.parseInt(digits, 16) : undefined;
}

const isHighSurrogate = (unit: number | undefined) => unit !== undefined && unit >= 0xd800 && unit <= 0xdbff;
const isLowSurrogate = (unit: number | undefined) => unit !== undefined && unit >= 0xdc00 && unit <= 0xdfff;

/**
 * JSON text as `jsonb` can store it: inside string literals (keys included) the escapes `\u0000`
 * and lone surrogate escapes become U+FFFD, then raw U+0000 and lone surrogates do too. Escapes
 * are read as JSON reads them, so `\\u0000` (an escaped backslash, then the letters `u0000`) is
 * left alone. Everything else is kept exactly, numbers and key order included. Text that is not
 * JSON stays not JSON: Postgres refuses it, and the sink deals with that row as a rejected one.
 */
export function storableJsonText(json: string): string {
  if (!SUSPECT_ESCAPE.test(json)) return storableText(json);
  const parts: string[] = [];
  let copiedUpTo = 0;
  let inString = false;
  let i = 0;
  while (i < json.length) {
    const c = json.charCodeAt(i);
    if (c === QUOTE) inString = !inString;
    if (!inString || c !== BACKSLASH) {
      i += 1;
      continue;
    }
    const unit = escapedUnit(json, i);
    if (unit === undefined) {
      // `\"`, `\\`, `\n`...: the escaped character is never the start of anything.
      i += 2;
      continue;
    }
    if (isHighSurrogate(unit) && isLowSurrogate(escapedUnit(json, i + 6))) {
      i += 12;
      continue;
    }
    if (unit === 0 || isHighSurrogate(unit) || isLowSurrogate(unit)) {
      parts.push(json.slice(copiedUpTo, i), REPLACEMENT_CHARACTER);
      copiedUpTo = i + 6;
    }
    i += 6;
  }
  parts.push(json.slice(copiedUpTo));
  return storableText(parts.join(''));
}

/** A value as storable JSON text, as JSON.stringify writes it; null for what it writes nothing (or `null`) for. */
export function storableJson(value: unknown): string | null {
  const json = value === null ? undefined : (JSON.stringify(value) as string | undefined);
  return json === undefined ? null : storableJsonText(json);
}
