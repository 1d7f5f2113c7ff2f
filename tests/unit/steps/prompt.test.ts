import { describe, expect, it } from 'vitest';
import { composeUserTurn } from '../../../src/steps/prompt.js';

describe('composeUserTurn', () => {
  it('puts the request first and each earlier step after it, in order', () => {
    const turn = composeUserTurn({ orderId: '42' }, { understand: { text: 'order 42, asks for ETA' }, 'lookup-order': { status: 'shipped' } });
    expect(turn).toBe('Request:\n{"orderId":"42"}\n\nEarlier steps:\n[understand] order 42, asks for ETA\n[lookup-order] {"status":"shipped"}');
  });

  it('passes a string request through unquoted and omits the section when there are no earlier steps', () => {
    expect(composeUserTurn('Where is my order?', {})).toBe('Request:\nWhere is my order?');
  });

  it('shows a tool marked unavailable as it is, so the model can say so', () => {
    expect(composeUserTurn({}, { lookup: { unavailable: true, reason: 'timeout' } })).toContain('[lookup] {"unavailable":true,"reason":"timeout"}');
  });
});
