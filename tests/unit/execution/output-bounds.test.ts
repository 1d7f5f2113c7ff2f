import { describe, expect, it } from 'vitest';
import { checkResult, checkStepOutput, jsonBytes } from '../../../src/execution/output-bounds.js';

const limits = { maxStepOutputBytes: 100, maxResultBytes: 250 };

describe('jsonBytes', () => {
  it('counts UTF-8 bytes of the JSON text, as stored', () => {
    expect(jsonBytes({ a: 1 })).toBe(7);
    expect(jsonBytes('é')).toBe(4); // "é": two quotes and a two-byte character
    expect(jsonBytes('😀')).toBe(6);
    expect(jsonBytes('\u0000')).toBe(8); // escaped as \u0000
    expect(jsonBytes(undefined)).toBe(4); // stored as null
    expect(jsonBytes(null)).toBe(4);
  });
});

describe('checkStepOutput', () => {
  it('keeps an output up to its bound and fails one byte over it with output_too_large', () => {
    expect(checkStepOutput(100, 0, limits)).toEqual({ ok: true });
    expect(checkStepOutput(101, 0, limits)).toEqual({ ok: false, code: 'output_too_large', message: 'its output is 101 bytes, over the bound of 100 (processor.maxStepOutputBytes)' });
  });

  it('fails with result_too_large once the outputs together pass the result bound', () => {
    expect(checkStepOutput(50, 200, limits)).toEqual({ ok: true });
    expect(checkStepOutput(51, 200, limits)).toEqual({ ok: false, code: 'result_too_large', message: 'the step outputs so far are 251 bytes, over the bound of 250 (processor.maxResultBytes)' });
  });

  it('reports the output bound first when both are passed', () => {
    expect(checkStepOutput(101, 200, limits)).toMatchObject({ ok: false, code: 'output_too_large' });
  });
});

describe('checkResult', () => {
  it('measures the result text in UTF-8 bytes against maxResultBytes', () => {
    expect(checkResult('x'.repeat(250), limits)).toEqual({ ok: true });
    expect(checkResult('x'.repeat(251), limits)).toEqual({ ok: false, code: 'result_too_large', message: 'the result is 251 bytes, over the bound of 250 (processor.maxResultBytes)' });
    expect(checkResult('é'.repeat(126), limits)).toMatchObject({ ok: false, code: 'result_too_large' });
  });
});
