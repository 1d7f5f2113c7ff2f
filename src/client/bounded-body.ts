/** The start of a response body as text, and whether it is the whole body. */
export interface BodyText {
  text: string;
  /** False when the body is longer than the limit: `text` is its first bytes up to the limit, and the rest was never read. */
  complete: boolean;
}

/**
 * At most `limitBytes` of a response body, as UTF-8 text. Past the limit the body is cancelled
 * rather than drained: a server, or a proxy in between, that answers with a huge or endless body
 * costs the caller the limit (and one chunk in flight) in memory and transfer, not the body.
 */
export async function readBodyText(res: Response, limitBytes: number): Promise<BodyText> {
  if (!res.body) return { text: '', complete: true };
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  let read = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { text: text + decoder.decode(), complete: true };
      const room = limitBytes - read;
      if (value.byteLength > room) return { text: text + decoder.decode(value.subarray(0, room)), complete: false };
      read += value.byteLength;
      text += decoder.decode(value, { stream: true });
    }
  } finally {
    // Read to its end this does nothing; else it closes the connection with the rest unread.
    await reader.cancel().catch(() => undefined);
  }
}
