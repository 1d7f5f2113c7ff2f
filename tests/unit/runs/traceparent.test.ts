import { describe, expect, it } from 'vitest';
import { childTraceparent, traceIdOf } from '../../../src/runs/traceparent.js';

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPAN = '00f067aa0ba902b7';
const INCOMING = `00-${TRACE}-${SPAN}-01`;
const FORMAT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

/** Deterministic randomness: n bytes of `fill`, with the requested sizes recorded. */
function fixedRandom(fill: number) {
  const sizes: number[] = [];
  const random = (n: number) => {
    sizes.push(n);
    return Buffer.alloc(n, fill);
  };
  return { random, sizes };
}

describe('childTraceparent continuing a trace', () => {
  it('keeps the trace id and flags and replaces the parent span id', () => {
    const { random, sizes } = fixedRandom(0xab);
    expect(childTraceparent(INCOMING, random)).toBe(`00-${TRACE}-abababababababab-01`);
    expect(sizes).toEqual([8]);
  });

  it('keeps an unsampled flag', () => {
    expect(childTraceparent(`00-${TRACE}-${SPAN}-00`, fixedRandom(0x11).random)).toBe(`00-${TRACE}-1111111111111111-00`);
  });

  it('uses a fresh span id with real randomness', () => {
    const out = childTraceparent(INCOMING);
    expect(out).toMatch(FORMAT);
    expect(traceIdOf(out)).toBe(TRACE);
    expect(out.split('-')[2]).not.toBe(SPAN);
    expect(out.endsWith('-01')).toBe(true);
  });

  it('accepts uppercase hex and answers in lowercase', () => {
    const upper = `00-${TRACE.toUpperCase()}-${SPAN.toUpperCase()}-01`;
    expect(childTraceparent(upper, fixedRandom(0xcd).random)).toBe(`00-${TRACE}-cdcdcdcdcdcdcdcd-01`);
  });

  it('ignores surrounding whitespace', () => {
    expect(childTraceparent(`  ${INCOMING}\t`, fixedRandom(0x01).random)).toBe(`00-${TRACE}-0101010101010101-01`);
  });
});

describe('childTraceparent starting a new trace', () => {
  const invalid: Array<[string, string | undefined]> = [
    ['missing', undefined],
    ['empty', ''],
    ['garbage', 'hello'],
    ['unknown version', `01-${TRACE}-${SPAN}-01`],
    ['version ff', `ff-${TRACE}-${SPAN}-01`],
    ['all-zero trace id', `00-${'0'.repeat(32)}-${SPAN}-01`],
    ['all-zero parent id', `00-${TRACE}-${'0'.repeat(16)}-01`],
    ['short trace id', `00-${TRACE.slice(1)}-${SPAN}-01`],
    ['long parent id', `00-${TRACE}-${SPAN}0-01`],
    ['non-hex', `00-${TRACE.replace(/^./, 'g')}-${SPAN}-01`],
    ['trailing field', `${INCOMING}-extra`],
    ['one-digit flags', `00-${TRACE}-${SPAN}-1`],
  ];

  for (const [label, value] of invalid) {
    it(`for a ${label} traceparent`, () => {
      const random = (n: number) => Buffer.alloc(n, n === 8 ? 0x22 : 0x33);
      const out = childTraceparent(value, random);
      // a 16-byte trace id and an 8-byte span id, both fresh; sampled.
      expect(out).toBe(`00-${'33'.repeat(16)}-${'22'.repeat(8)}-01`);
    });
  }

  it('draws a random 16-byte trace id and 8-byte span id', () => {
    const { random, sizes } = fixedRandom(0x7e);
    childTraceparent(undefined, random);
    expect(sizes.sort()).toEqual([16, 8].sort());
  });

  it('produces different valid traces with real randomness', () => {
    const a = childTraceparent(undefined);
    const b = childTraceparent(undefined);
    expect(a).toMatch(FORMAT);
    expect(b).toMatch(FORMAT);
    expect(traceIdOf(a)).not.toBe(traceIdOf(b));
    expect(traceIdOf(a)).not.toMatch(/^0+$/);
  });
});

describe('traceIdOf', () => {
  it('returns the trace id of a valid traceparent', () => {
    expect(traceIdOf(INCOMING)).toBe(TRACE);
  });

  it('returns undefined for anything else', () => {
    expect(traceIdOf('')).toBeUndefined();
    expect(traceIdOf('nope')).toBeUndefined();
    expect(traceIdOf(`01-${TRACE}-${SPAN}-01`)).toBeUndefined();
  });

  it('round-trips through childTraceparent', () => {
    const child = childTraceparent(INCOMING);
    expect(traceIdOf(childTraceparent(child))).toBe(TRACE);
  });
});
