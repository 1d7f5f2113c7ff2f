import { describe, expect, it } from 'vitest';
import { formatSseComment, formatSseEvent, parseLastEventId } from '../../../src/api/sse.js';
import { takeSseFrames } from '../../support/sse.js';

describe('SSE frames', () => {
  it('formats an event with id, type and data, ended by a blank line', () => {
    expect(formatSseEvent({ id: 1001, event: 'status', data: '{"a":1}' })).toBe('id: 1001\nevent: status\ndata: {"a":1}\n\n');
  });

  it('splits multi-line data into data fields that a client joins back', () => {
    const frame = formatSseEvent({ id: 3, event: 'status', data: 'one\ntwo\r\nthree\rfour' });
    expect(frame).toBe('id: 3\nevent: status\ndata: one\ndata: two\ndata: three\ndata: four\n\n');
    expect(takeSseFrames(frame).frames[0]!.data).toBe('one\ntwo\nthree\nfour');
  });

  it('formats a comment on one line', () => {
    expect(formatSseComment('keepalive')).toBe(': keepalive\n\n');
    expect(formatSseComment('a\nb')).toBe(': a b\n\n');
    expect(takeSseFrames(formatSseComment('keepalive')).frames).toEqual([{ comments: ['keepalive'] }]);
  });
});

describe('parseLastEventId', () => {
  it('accepts a non-negative integer, with surrounding spaces', () => {
    expect(parseLastEventId('0')).toEqual({ ok: true, after: 0 });
    expect(parseLastEventId('1999')).toEqual({ ok: true, after: 1999 });
    expect(parseLastEventId(' 1002 ')).toEqual({ ok: true, after: 1002 });
  });

  it('treats a missing or empty id as "from the start"', () => {
    expect(parseLastEventId(undefined)).toEqual({ ok: true, after: undefined });
    expect(parseLastEventId('')).toEqual({ ok: true, after: undefined });
  });

  it.each(['-1', '1.5', 'abc', '1e3', '0x10', '12 13', '99999999999999999'])('refuses %j', (raw) => {
    const r = parseLastEventId(raw);
    expect(r.ok).toBe(false);
  });
});
