/** Server-Sent Events wire format (WHATWG HTML, "server-sent events"), as pure functions. */

export interface SseEvent {
  id: number;
  event: string;
  data: string;
}

/**
 * One event frame. A line break inside `data` would end the field early, so each line becomes its
 * own `data:` field, which the client joins back with "\n".
 */
export function formatSseEvent(e: SseEvent): string {
  const data = e.data
    .split(/\r\n|\r|\n/)
    .map((line) => `data: ${line}\n`)
    .join('');
  return `id: ${e.id}\nevent: ${e.event}\n${data}\n`;
}

/** A comment frame: clients ignore it, but it keeps proxies and idle timers from closing the stream. */
export function formatSseComment(text: string): string {
  return `: ${text.replace(/\r\n|\r|\n/g, ' ')}\n\n`;
}

export type LastEventIdResult = { ok: true; after: number | undefined } | { ok: false; message: string };

/**
 * Event ids are status sequence numbers, so a valid Last-Event-ID is a non-negative integer. An
 * empty value means "no last id", as the SSE specification resets it.
 */
export function parseLastEventId(raw: string | undefined): LastEventIdResult {
  if (raw === undefined || raw.trim() === '') return { ok: true, after: undefined };
  const text = raw.trim();
  const n = Number(text);
  if (!/^\d{1,16}$/.test(text) || !Number.isSafeInteger(n)) return { ok: false, message: 'must be the id of an event from this stream (a non-negative integer)' };
  return { ok: true, after: n };
}
