import { describe, expect, it } from 'vitest';
import { REPLACEMENT_CHARACTER as R, storableJson, storableJsonText, storableNullableText, storableText } from '../../../src/db/storable-text.js';

const EMOJI = '\u{1F600}'; // the surrogate pair \ud83d\ude00
const HIGH = '\ud83d';
const LOW = '\ude00';

describe('storableText', () => {
  it.each([
    ['', ''],
    ['plain ascii', 'plain ascii'],
    ['caf\u00e9 \u4e2d\u6587', 'caf\u00e9 \u4e2d\u6587'],
    [`an emoji ${EMOJI} stays`, `an emoji ${EMOJI} stays`],
    ['controls \u0001\u001f\u007f stay', 'controls \u0001\u001f\u007f stay'],
    [R, R],
    ['hi \u0000', `hi ${R}`],
    ['\u0000\u0000', `${R}${R}`],
    [`${HIGH}`, R],
    [`${LOW}`, R],
    [`end ${HIGH}`, `end ${R}`],
    [`${LOW} start`, `${R} start`],
    [`${LOW}${HIGH}`, `${R}${R}`],
    [`${HIGH}${HIGH}${LOW}`, `${R}${EMOJI}`],
    [`${HIGH}${LOW}${LOW}`, `${EMOJI}${R}`],
    [`${HIGH}\u0000${LOW}`, `${R}${R}${R}`],
    ['\ud800\udc00\udbff\udfff', '\ud800\udc00\udbff\udfff'],
  ])('%j → %j', (input, expected) => {
    expect(storableText(input)).toBe(expected);
  });

  it('passes null through', () => {
    expect(storableNullableText(null)).toBeNull();
    expect(storableNullableText('a\u0000')).toBe(`a${R}`);
  });
});

describe('storableJsonText', () => {
  const storedAs = (value: unknown) => JSON.parse(storableJsonText(JSON.stringify(value))) as unknown;

  it('returns text with nothing to repair unchanged', () => {
    for (const json of ['{}', '[]', 'null', '"x"', '{"a":[1,2.50,{"b":"c\\n\\"\\\\"}]}', '{"emoji":"\\ud83d\\ude00"}', JSON.stringify({ e: EMOJI })]) {
      expect(storableJsonText(json)).toBe(json);
    }
  });

  it('replaces a \\u0000 escape in a value and in a key', () => {
    expect(storedAs({ message: 'hi \u0000' })).toEqual({ message: `hi ${R}` });
    expect(storedAs({ ['k\u0000']: 1 })).toEqual({ [`k${R}`]: 1 });
    expect(storableJsonText('{"a":"\\u0000\\u0000"}')).toBe(`{"a":"${R}${R}"}`);
  });

  it('reads escapes as JSON does: an escaped backslash followed by u0000 is not a NUL', () => {
    const text = JSON.stringify({ m: '\\u0000' });
    expect(text).toBe('{"m":"\\\\u0000"}');
    expect(storableJsonText(text)).toBe(text);
    // Three backslashes: an escaped backslash, then a real \u0000 escape.
    expect(storableJsonText('{"m":"\\\\\\u0000"}')).toBe(`{"m":"\\\\${R}"}`);
    expect(storedAs({ m: '\\\u0000' })).toEqual({ m: `\\${R}` });
  });

  it('tracks string boundaries past escaped quotes', () => {
    expect(storableJsonText('{"a":"x\\"y","b":"\\u0000"}')).toBe(`{"a":"x\\"y","b":"${R}"}`);
    expect(storableJsonText('{"a\\"":"\\"\\u0000\\""}')).toBe(`{"a\\"":"\\"${R}\\""}`);
  });

  it('replaces lone surrogate escapes, in either case, and keeps escaped pairs exactly', () => {
    expect(storableJsonText('{"m":"a\\ud800b"}')).toBe(`{"m":"a${R}b"}`);
    expect(storableJsonText('{"m":"a\\uDC00b"}')).toBe(`{"m":"a${R}b"}`);
    expect(storableJsonText('{"m":"\\uD83D\\uDE00"}')).toBe('{"m":"\\uD83D\\uDE00"}');
    expect(storableJsonText('{"m":"\\ude00\\ud83d"}')).toBe(`{"m":"${R}${R}"}`);
    expect(storableJsonText('{"m":"\\ud83d\\ud83d\\ude00"}')).toBe(`{"m":"${R}\\ud83d\\ude00"}`);
    expect(storableJsonText('{"m":"\\ud83d"}')).toBe(`{"m":"${R}"}`);
    expect(storableJsonText('{"m":"\\ud83d\\n"}')).toBe(`{"m":"${R}\\n"}`);
  });

  it('repairs what JSON.stringify writes for a lone surrogate (an emoji cut by a slice)', () => {
    const cut = `reply ${EMOJI}`.slice(0, -1);
    expect(JSON.stringify(cut)).toContain('\\ud83d');
    expect(storedAs({ text: cut })).toEqual({ text: `reply ${R}` });
  });

  it('replaces raw NUL and raw lone surrogates too', () => {
    expect(storableJsonText(`{"m":"a\u0000"}`)).toBe(`{"m":"a${R}"}`);
    expect(storableJsonText(`{"m":"${HIGH}","n":"\\u0000"}`)).toBe(`{"m":"${R}","n":"${R}"}`);
  });

  it('keeps numbers, whitespace and key order exactly while repairing', () => {
    const text = '{ "z": 12345678901234567890123, "a": 1.50, "m": "\\u0000", "e": 1E+2 }';
    expect(storableJsonText(text)).toBe(`{ "z": 12345678901234567890123, "a": 1.50, "m": "${R}", "e": 1E+2 }`);
  });

  it('never throws on text that is not JSON, and leaves it for Postgres to refuse', () => {
    for (const text of ['', '"', '\\', '"\\', '"\\u', '"\\u00', '"\\u0000', '"\\ud83d\\u', '"\\uzzzz"', '\\u0000', '{"a":\\u0000}']) {
      expect(() => storableJsonText(text)).not.toThrow();
    }
    expect(storableJsonText('"\\u0000')).toBe(`"${R}`);
    // Outside a string an escape means nothing to JSON; it stays, and Postgres refuses the text.
    expect(storableJsonText('{"a":\\u0000}')).toBe('{"a":\\u0000}');
  });

  it('matches storableText on every string made of the troublesome characters, as values and as keys', () => {
    const alphabet = ['\u0000', '\\', '"', 'u', '0', 'd', '8', HIGH, LOW, 'a', '\n', R];
    // Every string of length 0..4 over the alphabet: 22,621 of them.
    const strings = [''];
    for (let length = 1, layer = ['']; length <= 4; length++) {
      layer = layer.flatMap((s) => alphabet.map((c) => s + c));
      strings.push(...layer);
    }
    const wrong = strings.filter((s) => {
      const stored = storableJsonText(JSON.stringify({ [s]: s, list: [s] }));
      const parsed = JSON.parse(stored) as Record<string, unknown>;
      const want = storableText(s);
      return Object.keys(parsed).length !== 2 || parsed[want] !== want || (parsed.list as string[])[0] !== want || /(?<!\\)(?:\\\\)*\\u(?:0000|d[89a-f])/i.test(stored);
    });
    expect(wrong.map((s) => JSON.stringify(s))).toEqual([]);
  });
});

describe('storableJson', () => {
  it('writes what JSON.stringify writes, repaired', () => {
    expect(storableJson({ code: 'x', message: 'tool said \u0000', retryable: false })).toBe(`{"code":"x","message":"tool said ${R}","retryable":false}`);
    expect(storableJson({ a: 1, b: undefined, c: [undefined] })).toBe('{"a":1,"c":[null]}');
    expect(storableJson({ ['sluice-dlt-exception-message']: `cut ${HIGH}` })).toBe(`{"sluice-dlt-exception-message":"cut ${R}"}`);
  });

  it('is null for null and for what JSON.stringify writes nothing for', () => {
    expect(storableJson(null)).toBeNull();
    expect(storableJson(undefined)).toBeNull();
  });
});
