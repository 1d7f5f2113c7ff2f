import { describe, expect, it } from 'vitest';
import { nestsDeeperThan, serializeRunInput } from '../../../src/runs/run-input.js';

const arrays = (depth: number): unknown => {
  let v: unknown = [];
  for (let i = 1; i < depth; i++) v = [v];
  return v;
};
const objects = (depth: number): unknown => {
  let v: unknown = {};
  for (let i = 1; i < depth; i++) v = { k: v };
  return v;
};

describe('nestsDeeperThan', () => {
  it('counts containers, not scalars: a scalar is depth 0, {} and [] depth 1', () => {
    for (const scalar of [null, 0, 'text', true, '']) {
      expect(nestsDeeperThan(scalar, 0)).toBe(false);
    }
    expect(nestsDeeperThan({}, 0)).toBe(true);
    expect(nestsDeeperThan([], 1)).toBe(false);
    expect(nestsDeeperThan({ a: 1, b: 'x' }, 1)).toBe(false);
    expect(nestsDeeperThan({ a: [] }, 1)).toBe(true);
  });

  it('is exact at the bound, for arrays, objects and mixtures', () => {
    for (const make of [arrays, objects]) {
      for (const depth of [1, 2, 63, 64, 65]) {
        expect(nestsDeeperThan(make(depth), 64), `${make.name} ${depth}`).toBe(depth > 64);
        expect(nestsDeeperThan(make(depth), depth)).toBe(false);
        expect(nestsDeeperThan(make(depth), depth - 1)).toBe(true);
      }
    }
    expect(nestsDeeperThan({ a: [{ b: [{}] }] }, 5)).toBe(false);
    expect(nestsDeeperThan({ a: [{ b: [{}] }] }, 4)).toBe(true);
    expect(nestsDeeperThan({ a: [{ b: [{ c: [] }] }] }, 5)).toBe(true);
  });

  it('finds the one deep branch among many shallow ones', () => {
    const wide = Object.fromEntries(Array.from({ length: 1_000 }, (_, i) => [`k${i}`, { v: i }]));
    expect(nestsDeeperThan({ ...wide, deep: arrays(10) }, 10)).toBe(true);
    expect(nestsDeeperThan({ ...wide, deep: arrays(9) }, 10)).toBe(false);
  });

  it('takes no call stack: a million levels, where any recursive walk overflows', () => {
    const deep = arrays(1_000_000);
    expect(() => JSON.stringify(deep)).toThrow(RangeError);
    expect(nestsDeeperThan(deep, 64)).toBe(true);
    expect(nestsDeeperThan(deep, 1_000_000)).toBe(false);
  });
});

describe('serializeRunInput', () => {
  const bounds = { maxDepth: 8, maxBytes: 64 };

  it('answers canonical JSON text: keys sorted at every depth, arrays in order', () => {
    expect(serializeRunInput({ b: [3, { d: 1, c: 2 }], a: null }, bounds)).toEqual({ ok: true, json: '{"a":null,"b":[3,{"c":2,"d":1}]}' });
    expect(serializeRunInput('plain', bounds)).toEqual({ ok: true, json: '"plain"' });
  });

  it('refuses deep nesting at /input before serializing it', () => {
    expect(serializeRunInput(arrays(100_000), bounds)).toEqual({ ok: false, error: { path: '/input', message: 'nests arrays and objects deeper than 8 levels' } });
  });

  it('bounds the JSON text in UTF-8 bytes, not characters', () => {
    expect(serializeRunInput('x'.repeat(62), bounds)).toMatchObject({ ok: true });
    expect(serializeRunInput('x'.repeat(63), bounds)).toEqual({ ok: false, error: { path: '/input', message: 'is 65 bytes as JSON; the limit is 64' } });
    // "é" is two bytes in UTF-8: 31 of them and the quotes are exactly 64, 32 are over.
    expect(serializeRunInput('é'.repeat(31), bounds)).toEqual({ ok: true, json: `"${'é'.repeat(31)}"` });
    expect(serializeRunInput('é'.repeat(32), bounds)).toEqual({ ok: false, error: { path: '/input', message: 'is 66 bytes as JSON; the limit is 64' } });
  });
});
