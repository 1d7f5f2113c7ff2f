import { describe, expect, it } from 'vitest';
import { SseEventTooLargeError } from '../../../src/client/errors.js';
import { SseParser, type SseMessage } from '../../../src/client/sse-parser.js';
import { formatSseComment, formatSseEvent } from '../../../src/api/sse.js';

const bytes = (text: string) => new TextEncoder().encode(text);

/** Every message of `chunks`, fed one after another to one parser. */
function parse(chunks: (string | Uint8Array)[], maxEventBytes = 1024): { messages: SseMessage[]; parser: SseParser } {
  const parser = new SseParser(maxEventBytes);
  const messages = chunks.flatMap((c) => parser.push(typeof c === 'string' ? bytes(c) : c));
  return { messages, parser };
}

describe('SseParser', () => {
  it('reads what the server writes: id, event and multi-line data, with comments between', () => {
    const wire = formatSseComment('waiting for the next status') + formatSseEvent({ id: 3, event: 'status', data: 'line one\nline two' }) + formatSseComment('keepalive') + formatSseEvent({ id: 4, event: 'status', data: '{}' });
    expect(parse([wire]).messages).toEqual([
      { id: '3', event: 'status', data: 'line one\nline two' },
      { id: '4', event: 'status', data: '{}' },
    ]);
  });

  it('gives the same messages however the bytes are cut, a UTF-8 character and a CRLF included', () => {
    const wire = bytes('id: 1\r\nevent: status\r\ndata: café ✓\r\n\r\n: keepalive\r\rid: 2\ndata: b\n\n');
    const whole = parse([wire]).messages;
    expect(whole).toEqual([
      { id: '1', event: 'status', data: 'café ✓' },
      { id: '2', event: 'message', data: 'b' },
    ]);
    for (let cut = 1; cut < wire.length; cut++) expect(parse([wire.subarray(0, cut), wire.subarray(cut)]).messages).toEqual(whole);
    expect(parse([...wire].map((b) => Uint8Array.of(b))).messages).toEqual(whole);
  });

  it('follows the field rules: one leading space stripped, a bare field name, unknown fields ignored', () => {
    expect(parse(['data:no space\ndata:  two spaces\ndata\nfoo: bar\n\n']).messages).toEqual([{ id: '', event: 'message', data: 'no space\n two spaces\n' }]);
  });

  it('dispatches nothing for a block without data, but keeps its id for the next event and a reconnect', () => {
    const { messages, parser } = parse(['id: 7\n\nevent: status\n\ndata: x\n\n']);
    expect(messages).toEqual([{ id: '7', event: 'message', data: 'x' }]);
    expect(parser.lastEventId).toBe('7');
  });

  it('ignores an id with a NUL, reads a numeric retry and ignores another', () => {
    const { parser } = parse(['id: 5\n\nid: 6\0\nretry: 1500\n\nretry: soon\n\n']);
    expect(parser.lastEventId).toBe('5');
    expect(parser.retryMs).toBe(1500);
  });

  it('holds an unfinished event back, its id included: a reconnect must ask for it again', () => {
    const { messages, parser } = parse(['id: 1\ndata: complete\n\nid: 2\ndata: cut off\n']);
    expect(messages).toEqual([{ id: '1', event: 'message', data: 'complete' }]);
    expect(parser.lastEventId).toBe('1');
  });

  it('rejects an event longer than its bound, whether its lines end or not', () => {
    expect(() => parse([`data: ${'x'.repeat(100)}\n`], 64)).toThrow(SseEventTooLargeError);
    expect(() => parse([`data: ${'x'.repeat(100)}`], 64)).toThrow(SseEventTooLargeError);
    expect(() => parse(['data: 0123456789\n'.repeat(8)], 64)).toThrow(SseEventTooLargeError);
  });

  it('counts the bound per event, not per stream, and not for comments between events', () => {
    const event = 'data: 0123456789\n\n';
    expect(parse([event.repeat(50), ': keepalive\n\n'.repeat(50)], 64).messages).toHaveLength(50);
  });
});
