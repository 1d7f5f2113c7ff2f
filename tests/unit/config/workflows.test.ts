import { describe, expect, it } from 'vitest';
import { dependenciesOf, dependencyOf } from '../../../src/config/workflows.js';

describe('dependencyOf', () => {
  it("names an LLM step's dependency and a tool step's tool", () => {
    expect(dependencyOf({ kind: 'llm', dependency: 'anthropic' })).toBe('anthropic');
    expect(dependencyOf({ kind: 'tool', tool: 'order_lookup' })).toBe('order_lookup');
  });
});

describe('dependenciesOf', () => {
  it('names each dependency once, in the order the steps first use it', () => {
    expect(
      dependenciesOf([
        { kind: 'tool', tool: 'order_lookup' },
        { kind: 'llm', dependency: 'anthropic' },
        { kind: 'tool', tool: 'order_lookup' },
        { kind: 'tool', tool: 'slow_report' },
        { kind: 'llm', dependency: 'anthropic' },
      ]),
    ).toEqual(['order_lookup', 'anthropic', 'slow_report']);
  });

  it('is empty for no steps', () => {
    expect(dependenciesOf([])).toEqual([]);
  });

  it('treats an LLM dependency and a tool of the same name as one dependency', () => {
    expect(dependenciesOf([{ kind: 'llm', dependency: 'x' }, { kind: 'tool', tool: 'x' }])).toEqual(['x']);
  });
});
