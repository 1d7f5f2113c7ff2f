import { describe, expect, it } from 'vitest';
import { PartitionProgress } from '../../../src/processors/partition-progress.js';

describe('PartitionProgress', () => {
  it('has nothing to commit before the first record', () => {
    const p = new PartitionProgress();
    expect(p.position()).toBeUndefined();
    expect(p.committable()).toBeUndefined();
  });

  it('commits only up to the lowest unfinished offset when records finish out of order', () => {
    const p = new PartitionProgress();
    for (const o of [10, 11, 12]) expect(p.track(o)).toBe('new');
    p.finish(12);
    p.finish(11);
    expect(p.committable()).toBe(10);
    p.finish(10);
    expect(p.committable()).toBe(13);
    expect(p.inFlight).toBe(0);
  });

  it('reports re-fetched records as duplicates, whether finished or still running', () => {
    const p = new PartitionProgress();
    p.track(5);
    p.track(6);
    p.finish(5);
    expect(p.track(5)).toBe('duplicate');
    expect(p.track(6)).toBe('duplicate');
    expect(p.track(7)).toBe('new');
    expect(p.inFlight).toBe(2);
  });

  it('knows which offsets it has seen, without tracking them', () => {
    const p = new PartitionProgress();
    expect(p.seen(0)).toBe(false);
    p.track(4);
    expect(p.seen(3)).toBe(true);
    expect(p.seen(4)).toBe(true);
    expect(p.seen(5)).toBe(false);
    expect(p.inFlight).toBe(1);
  });

  it('offers a position once, until it moves again', () => {
    const p = new PartitionProgress();
    p.track(0);
    p.finish(0);
    expect(p.committable()).toBe(1);
    p.markCommitted(1);
    expect(p.committable()).toBeUndefined();
    p.track(1);
    expect(p.committable()).toBeUndefined();
    p.finish(1);
    expect(p.committable()).toBe(2);
  });

  it('never moves the committed mark backwards', () => {
    const p = new PartitionProgress();
    p.track(3);
    p.finish(3);
    p.markCommitted(4);
    p.markCommitted(2);
    expect(p.committable()).toBeUndefined();
  });

  it('tolerates gaps in offsets (compacted or transactional markers)', () => {
    const p = new PartitionProgress();
    p.track(100);
    p.track(105);
    p.finish(105);
    expect(p.committable()).toBe(100);
    p.finish(100);
    expect(p.committable()).toBe(106);
  });

  it('rejects offsets that are not non-negative safe integers', () => {
    const p = new PartitionProgress();
    expect(() => p.track(-1)).toThrow(RangeError);
    expect(() => p.track(1.5)).toThrow(RangeError);
    expect(() => p.track(Number.MAX_SAFE_INTEGER + 2)).toThrow(RangeError);
  });
});
