import { describe, expect, it } from 'vitest';
import type { WritePause } from '../../../src/db/isolated-write.js';
import type { ArchivedDeadLetter } from '../../../src/dlq/dead-letter-store.js';
import { archiveWithFallback } from '../../../src/dlq/dlq-sink.js';
import { serverError } from '../../support/postgres-errors.js';

/** An archive table that refuses the entries listed in `refuse`; entries are names, minimal forms end in `:min`. */
function fakeArchive(refuse: Record<string, unknown>, opts: { giveUpOn?: WritePause['cause'] } = {}) {
  const archived: string[] = [];
  const pauses: WritePause[] = [];
  const write = {
    apply: async (entries: readonly string[]) => {
      const bad = entries.find((e) => e in refuse);
      if (bad !== undefined) throw refuse[bad];
      archived.push(...entries);
      return entries.map((e) => ({ originalOffset: e }) as ArchivedDeadLetter);
    },
    pause: async (p: WritePause) => {
      pauses.push(p);
      return p.cause !== opts.giveUpOn;
    },
  };
  return { write, archived, pauses };
}

const minimalOf = ({ item }: { item: string }) => `${item}:min`;

describe('archiveWithFallback', () => {
  it('archives a clean batch as it is', async () => {
    const t = fakeArchive({});
    const out = await archiveWithFallback(['a', 'b'], t.write, minimalOf);
    expect(out).toEqual({ fresh: [{ originalOffset: 'a' }, { originalOffset: 'b' }], unarchivable: [], skipped: [] });
  });

  it('archives a refused entry in minimal form, and the others as they are', async () => {
    const t = fakeArchive({ b: serverError('22P02') });
    const out = await archiveWithFallback(['a', 'b', 'c'], t.write, minimalOf);
    expect(t.archived).toEqual(['a', 'c', 'b:min']);
    expect(out!.fresh.map((r) => r.originalOffset)).toEqual(['a', 'c', 'b:min']);
    expect(out!.unarchivable.map((r) => [r.item, r.error.message])).toEqual([['b', 'SQLSTATE 22P02: server said 22P02']]);
    expect(out!.skipped).toEqual([]);
  });

  it('skips an entry refused even in minimal form, with that refusal, and keeps going', async () => {
    const t = fakeArchive({ b: serverError('22P02'), 'b:min': serverError('22008'), c: serverError('23502') });
    const out = await archiveWithFallback(['a', 'b', 'c', 'd'], t.write, minimalOf);
    expect(t.archived).toEqual(['a', 'd', 'c:min']);
    expect(out!.unarchivable.map((r) => r.item)).toEqual(['c']);
    expect(out!.skipped.map((r) => [r.item, r.error.sqlState])).toEqual([['b:min', '22008']]);
    expect(t.pauses).toEqual([]);
  });

  it('resolves undefined when the caller gives up during the first write', async () => {
    const t = fakeArchive({ a: Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }) }, { giveUpOn: 'transient' });
    expect(await archiveWithFallback(['a'], t.write, minimalOf)).toBeUndefined();
  });

  it('skips a minimal form refused for a reason that is not its data when the same statement archived others', async () => {
    const t = fakeArchive({ b: serverError('22P02'), 'b:min': new TypeError('cannot serialize a value') });
    const out = await archiveWithFallback(['a', 'b'], t.write, minimalOf);
    expect(out!.skipped.map((r) => [r.item, r.error.message])).toEqual([['b:min', 'no SQLSTATE: cannot serialize a value']]);
    expect(t.pauses).toEqual([]);
  });

  it('retries, rather than skips, when nothing was archived and the minimal form fails for a reason that is not its data', async () => {
    const t = fakeArchive({ b: serverError('22P02'), 'b:min': serverError('42P01') }, { giveUpOn: 'systemic' });
    expect(await archiveWithFallback(['b'], t.write, minimalOf)).toBeUndefined();
    expect(t.pauses.map((p) => p.cause)).toEqual(['systemic']);
  });
});
