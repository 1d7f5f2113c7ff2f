import { SseEventTooLargeError } from './errors.js';

/**
 * The reading half of Server-Sent Events (WHATWG HTML, "parsing an event stream"), fed bytes as
 * they arrive. Lines are split on bytes, where CR and LF cannot be part of a UTF-8 sequence, so a
 * character cut between chunks is decoded whole and an event's size is counted in bytes.
 */

export interface SseMessage {
  /** The last event id when the event was dispatched (ids persist across events, as the spec says). */
  id: string;
  event: string;
  data: string;
}

const LF = 0x0a;
const CR = 0x0d;

export class SseParser {
  /**
   * The id of the last event dispatched: what a reconnect sends as Last-Event-ID. An `id:` of an
   * event the stream lost half of does not count, or its event would never be sent again.
   */
  lastEventId = '';
  private idBuffer: string | undefined;
  /** The server's `retry:` in milliseconds, once it sent one. */
  retryMs: number | undefined;
  private readonly decoder = new TextDecoder();
  /** The current line's bytes so far: it has no end yet. */
  private partial: Uint8Array[] = [];
  private partialBytes = 0;
  /** Bytes of the field lines of the event being read (comments do not count: they end with their line). */
  private eventBytes = 0;
  private data: string[] = [];
  private type = '';
  /** The last chunk ended in CR, so an LF starting the next one ends nothing. */
  private skipLf = false;

  constructor(private readonly maxEventBytes: number) {}

  /** The events completed by this chunk; throws SseEventTooLargeError past the bound. */
  push(chunk: Uint8Array): SseMessage[] {
    const out: SseMessage[] = [];
    let start = 0;
    for (let i = 0; i < chunk.length; i++) {
      const b = chunk[i];
      if (this.skipLf) {
        this.skipLf = false;
        if (b === LF) {
          start = i + 1;
          continue;
        }
      }
      if (b !== LF && b !== CR) continue;
      const bytes = this.partialBytes + i - start;
      this.line(this.takeLine(chunk.subarray(start, i)), bytes, out);
      this.skipLf = b === CR;
      start = i + 1;
    }
    if (start < chunk.length) {
      this.partial.push(chunk.slice(start));
      this.partialBytes += chunk.length - start;
      this.checkBound(0);
    }
    return out;
  }

  private takeLine(end: Uint8Array): string {
    if (this.partial.length === 0) return this.decoder.decode(end);
    const line = new Uint8Array(this.partialBytes + end.length);
    let at = 0;
    for (const part of [...this.partial, end]) {
      line.set(part, at);
      at += part.length;
    }
    this.partial = [];
    this.partialBytes = 0;
    return this.decoder.decode(line);
  }

  private line(text: string, bytes: number, out: SseMessage[]): void {
    if (text === '') return this.dispatch(out);
    if (text.startsWith(':')) return;
    this.checkBound(bytes + 1);
    this.eventBytes += bytes + 1;
    const colon = text.indexOf(':');
    const field = colon === -1 ? text : text.slice(0, colon);
    const value = colon === -1 ? '' : text.slice(colon + 1).replace(/^ /, '');
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.type = value;
    else if (field === 'id' && !value.includes('\0')) this.idBuffer = value;
    else if (field === 'retry' && /^\d+$/.test(value)) this.retryMs = Number(value);
  }

  private dispatch(out: SseMessage[]): void {
    this.lastEventId = this.idBuffer ?? this.lastEventId;
    if (this.data.length > 0) out.push({ id: this.lastEventId, event: this.type || 'message', data: this.data.join('\n') });
    this.data = [];
    this.type = '';
    this.eventBytes = 0;
  }

  private checkBound(more: number): void {
    if (this.eventBytes + this.partialBytes + more > this.maxEventBytes) throw new SseEventTooLargeError(this.maxEventBytes);
  }
}
