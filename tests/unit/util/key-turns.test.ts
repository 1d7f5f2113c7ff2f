import { describe, expect, it } from 'vitest';
import { KeyTurns } from '../../../src/util/key-turns.js';

/** A promise and the functions that settle it. */
function gate(): { promise: Promise<void>; open: () => void; fail: (err: Error) => void } {
  let open!: () => void;
  let fail!: (err: Error) => void;
  const promise = new Promise<void>((resolve, reject) => {
    open = resolve;
    fail = reject;
  });
  return { promise, open, fail };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('KeyTurns', () => {
  it('runs tasks of one key one after another, in the order given', async () => {
    const turns = new KeyTurns();
    const first = gate();
    const started: string[] = [];
    const a = turns.run('k', async () => {
      started.push('a');
      await first.promise;
      return 'a';
    });
    const b = turns.run('k', async () => {
      started.push('b');
      return 'b';
    });
    await tick();
    expect(started).toEqual(['a']);
    first.open();
    expect(await Promise.all([a, b])).toEqual(['a', 'b']);
    expect(started).toEqual(['a', 'b']);
  });

  it('runs tasks of different keys at once', async () => {
    const turns = new KeyTurns();
    const held = gate();
    const started: string[] = [];
    const a = turns.run('k1', async () => {
      started.push('k1');
      await held.promise;
    });
    const b = turns.run('k2', async () => {
      started.push('k2');
    });
    await b;
    expect(started).toEqual(['k1', 'k2']);
    held.open();
    await a;
  });

  it('runs the next task of a key after a failed one, and gives each caller its own result', async () => {
    const turns = new KeyTurns();
    const first = gate();
    const a = turns.run('k', () => first.promise);
    const b = turns.run('k', async () => 'b');
    first.fail(new Error('boom'));
    await expect(a).rejects.toThrow('boom');
    expect(await b).toBe('b');
  });

  it('forgets a key once its last task settled', async () => {
    const turns = new KeyTurns();
    const held = gate();
    const a = turns.run('k', () => held.promise);
    const b = turns.run('k', async () => undefined);
    expect(turns.size).toBe(1);
    held.open();
    await Promise.all([a, b]);
    await tick();
    expect(turns.size).toBe(0);
  });
});
