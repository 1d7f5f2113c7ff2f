import { describe, expect, it } from 'vitest';
import { oldestPerScope, WaiterBook, type PermitWaiter } from '../../../src/permits/oldest-waiters.js';

const waiter = (since: number, ...scopes: string[]): PermitWaiter => ({ scopes, since });

describe('oldestPerScope', () => {
  it('takes, per scope, the earliest start among the waiters needing it', () => {
    const oldest = oldestPerScope([
      waiter(300, 'global', 'tenant:a', 'workflow:w'),
      waiter(100, 'global', 'class:batch', 'tenant:b', 'workflow:w'),
      waiter(200, 'global', 'tenant:a', 'workflow:v'),
      waiter(50, 'dependency:llm'),
    ]);
    expect(Object.fromEntries(oldest)).toEqual({ global: 100, 'class:batch': 100, 'tenant:a': 200, 'tenant:b': 100, 'workflow:w': 100, 'workflow:v': 200, 'dependency:llm': 50 });
  });

  it('answers nothing for no waiters', () => {
    expect(oldestPerScope([]).size).toBe(0);
  });
});

describe('WaiterBook', () => {
  const oldestOf = (book: WaiterBook) => Object.fromEntries(oldestPerScope(book.waiters()));

  it('follows waiters as they come and go in any order', () => {
    const book = new WaiterBook();
    const first = book.enter(['dependency:llm'], 100);
    const second = book.enter(['dependency:llm'], 200);
    const tool = book.enter(['dependency:kb'], 150);
    expect(oldestOf(book)).toEqual({ 'dependency:llm': 100, 'dependency:kb': 150 });
    first();
    expect(oldestOf(book)).toEqual({ 'dependency:llm': 200, 'dependency:kb': 150 });
    tool();
    second();
    expect(oldestOf(book)).toEqual({});
    expect(book.size).toBe(0);
  });

  it('keeps a tie: two waiters since the same moment are two, and the scope waits until both left', () => {
    const book = new WaiterBook();
    const a = book.enter(['dependency:llm'], 100);
    const b = book.enter(['dependency:llm'], 100);
    a();
    // Leaving twice takes nobody else with it.
    a();
    expect(oldestOf(book)).toEqual({ 'dependency:llm': 100 });
    b();
    expect(oldestOf(book)).toEqual({});
  });

  it("keeps its own copy of a waiter's scopes", () => {
    const book = new WaiterBook();
    const scopes = ['dependency:llm'];
    book.enter(scopes, 100);
    scopes[0] = 'dependency:other';
    expect(oldestOf(book)).toEqual({ 'dependency:llm': 100 });
  });
});
