import { describe, expect, it } from 'vitest';
import type { RunClass } from '../../../src/events/schemas.js';
import { FairQueue, type Waiting } from '../../../src/processors/fair-queue.js';

const w = (tenant: string, item: string, runClass: RunClass = 'interactive', enqueuedAt = 0): Waiting<string> => ({ tenant, item, runClass, enqueuedAt });
const none = () => false;

/** Serves everything, recording the order: what a dispatcher with unlimited permits would do. */
function drain(q: FairQueue<string>, blocked: (c: RunClass, t: string) => boolean = none): string[] {
  const order: string[] = [];
  for (let next = q.peek(blocked); next; next = q.peek(blocked)) {
    q.take(next);
    order.push(next.item);
  }
  return order;
}

describe('FairQueue', () => {
  it('serves tenants round-robin, each tenant in arrival order', () => {
    const q = new FairQueue<string>();
    for (const i of [1, 2, 3, 4]) q.push(w('noisy', `n${i}`));
    q.push(w('quiet', 'q1'));
    q.push(w('other', 'o1'));
    expect(drain(q)).toEqual(['n1', 'q1', 'o1', 'n2', 'n3', 'n4']);
    expect(q.size).toBe(0);
  });

  it('puts a late-arriving quiet tenant second in line, not behind the noisy backlog', () => {
    const q = new FairQueue<string>();
    for (let i = 0; i < 100; i++) q.push(w('noisy', `n${i}`));
    const first = q.peek(none)!;
    q.take(first);
    q.push(w('quiet', 'q1'));
    expect(q.peek(none)!.item).toBe('n1');
    q.take(q.peek(none)!);
    expect(q.peek(none)!.item).toBe('q1');
  });

  it('skips a tenant at its cap without blocking the others (no head-of-line blocking)', () => {
    const q = new FairQueue<string>();
    q.push(w('capped', 'c1'));
    q.push(w('capped', 'c2'));
    q.push(w('free', 'f1'));
    q.push(w('free', 'f2'));
    expect(drain(q, (_c, t) => t === 'capped')).toEqual(['f1', 'f2']);
    expect(q.size).toBe(2);
    expect(drain(q)).toEqual(['c1', 'c2']);
  });

  it('tries interactive before batch, and batch when interactive is blocked or empty', () => {
    const q = new FairQueue<string>();
    q.push(w('a', 'b1', 'batch'));
    q.push(w('a', 'i1', 'interactive'));
    expect(q.peek(none)!.item).toBe('i1');
    expect(q.peek((c) => c === 'interactive')!.item).toBe('b1');
    expect(drain(q)).toEqual(['i1', 'b1']);
  });

  it('keeps classes separate: the same tenant has a line in each', () => {
    const q = new FairQueue<string>();
    q.push(w('a', 'i1', 'interactive', 5));
    q.push(w('a', 'b1', 'batch', 1));
    q.push(w('b', 'b2', 'batch', 3));
    expect(q.sizeOf('interactive')).toBe(1);
    expect(q.sizeOf('batch')).toBe(2);
    expect(q.oldest('batch')).toBe(1);
    expect(q.oldest('interactive')).toBe(5);
  });

  it('has no oldest age and nothing to peek when empty or all blocked', () => {
    const q = new FairQueue<string>();
    expect(q.oldest('batch')).toBeUndefined();
    expect(q.peek(none)).toBeUndefined();
    q.push(w('a', 'x'));
    expect(q.peek(() => true)).toBeUndefined();
  });

  it('refuses to take anything but a run returned by peek', () => {
    const q = new FairQueue<string>();
    q.push(w('a', 'x1'));
    q.push(w('a', 'x2'));
    expect(() => q.take(w('a', 'x2'))).toThrow(/the run that peek\(\) returned/);
    expect(() => q.take(w('zzz', 'x1'))).toThrow(/the run that peek\(\) returned/);
  });

  it('removes the runs of a revoked partition and keeps the rotation consistent', () => {
    const q = new FairQueue<string>();
    q.push(w('a', 'p0-1'));
    q.push(w('b', 'p1-1'));
    q.push(w('a', 'p1-2'));
    q.push(w('c', 'p0-2', 'batch'));
    const removed = q.removeWhere((item) => item.startsWith('p0'));
    expect(removed.map((r) => r.item).sort()).toEqual(['p0-1', 'p0-2']);
    expect(q.size).toBe(2);
    // Tenant a keeps its turn ahead of b; c had only revoked work and left the rotation.
    expect(drain(q)).toEqual(['p1-2', 'p1-1']);
  });

  it('puts a refused run back at the head of its line, its tenant first in the rotation', () => {
    const q = new FairQueue<string>();
    q.push(w('a', 'a1'));
    q.push(w('a', 'a2'));
    q.push(w('b', 'b1'));
    const head = q.peek(none)!;
    q.take(head);
    q.putBack(head);
    expect(q.size).toBe(3);
    expect(drain(q)).toEqual(['a1', 'b1', 'a2']);
  });

  it('restores a tenant whose only run was taken and refused', () => {
    const q = new FairQueue<string>();
    q.push(w('a', 'a1'));
    q.push(w('b', 'b1'));
    const head = q.peek(none)!;
    q.take(head);
    q.putBack(head);
    expect(drain(q)).toEqual(['a1', 'b1']);
  });

  it('lists every waiting run, of both classes, a taken one not until it is put back', () => {
    const q = new FairQueue<string>();
    q.push(w('a', 'a1'));
    q.push(w('a', 'a2'));
    q.push(w('b', 'b1', 'batch'));
    const head = q.peek(none)!;
    q.take(head);
    expect([...q].map((x) => x.item).sort()).toEqual(['a2', 'b1']);
    q.putBack(head);
    expect([...q].map((x) => x.item).sort()).toEqual(['a1', 'a2', 'b1']);
  });

  describe('adaptive LIFO for a standing interactive line', () => {
    let now = 0;
    const lifo = () => new FairQueue<string>({ interactiveAfterMs: 500, now: () => now });

    it('serves in order while the oldest has waited no longer than the bound, newest first after it', () => {
      const q = lifo();
      for (const [i, at] of [0, 100, 200, 300].entries()) q.push(w('a', `a${i}`, 'interactive', at));
      now = 500;
      const first = q.peek(none)!;
      expect(first.item).toBe('a0');
      q.take(first);
      now = 701;
      // the oldest left (a1, queued at 100) has waited 601 ms: the newest goes first, until the line is short
      expect(drain(q)).toEqual(['a3', 'a2', 'a1']);
    });

    it('never serves batch out of order, nor without a bound', () => {
      now = 10_000;
      const q = lifo();
      for (const [i, at] of [0, 100, 200].entries()) q.push(w('b', `b${i}`, 'batch', at));
      expect(drain(q)).toEqual(['b0', 'b1', 'b2']);
      const plain = new FairQueue<string>();
      for (const [i, at] of [0, 100, 200].entries()) plain.push(w('a', `a${i}`, 'interactive', at));
      expect(drain(plain)).toEqual(['a0', 'a1', 'a2']);
    });

    it('puts a run taken from the back back in its place, so a refused newest run keeps its turn', () => {
      const q = lifo();
      for (const [i, at] of [0, 100, 200].entries()) q.push(w('a', `a${i}`, 'interactive', at));
      now = 1_000;
      const newest = q.peek(none)!;
      expect(newest.item).toBe('a2');
      q.take(newest);
      q.putBack(newest);
      expect([...q].map((x) => x.item)).toEqual(['a0', 'a1', 'a2']);
      expect(q.peek(none)!.item).toBe('a2');
    });
  });
});
