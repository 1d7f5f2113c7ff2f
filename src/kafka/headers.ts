import type { IHeaders } from 'kafkajs';

/** A header's text; a key sent more than once counts by its last value, as Kafka's Java client reads it. */
export function headerText(headers: IHeaders | undefined, name: string): string | undefined {
  const raw = headers?.[name];
  const value = Array.isArray(raw) ? raw[raw.length - 1] : raw;
  return value === undefined ? undefined : value.toString();
}

/** Every header as text, read the same way as `headerText`. */
export function headerRecord(headers: IHeaders | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of Object.keys(headers ?? {})) {
    const value = headerText(headers, name);
    if (value !== undefined) out[name] = value;
  }
  return out;
}
