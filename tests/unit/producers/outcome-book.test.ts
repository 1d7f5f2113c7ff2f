import { describe, expect, it } from 'vitest';
import { statusEvent } from './status-event.js';
import { OutcomeBook } from '../../../src/producers/outcome-book.js';
import { OutcomeTimeoutError, OutcomeUnavailableError, UnknownRequestError } from '../../../src/producers/producer-errors.js';

const status = statusEvent;

describe('the outcome book', () => {
  it("resolves a wait when its request's answer and then its run's end come", async () => {
    const book = new OutcomeBook(10);
    book.track('req-1');
    const admitted = book.wait('req-1', 'admission', 1_000);
    const ended = book.wait('req-1', 'terminal', 1_000);
    book.record(status({ requestId: 'req-1' }));
    expect(await admitted).toMatchObject({ requestId: 'req-1', runId: 'run-1', status: 'queued' });
    book.record(status({ status: 'completed', sequence: 7 }));
    expect(await ended).toMatchObject({ requestId: 'req-1', status: 'completed' });
    // Known outcomes answer at once.
    expect(await book.wait('req-1', 'admission', 1)).toMatchObject({ status: 'queued' });
  });

  it("follows a duplicate's request to the run it shares with the first", async () => {
    const book = new OutcomeBook(10);
    book.track('first');
    book.track('again');
    book.record(status({ requestId: 'first' }));
    book.record(status({ requestId: 'again' }));
    const ended = Promise.all([book.wait('first', 'terminal', 1_000), book.wait('again', 'terminal', 1_000)]);
    book.record(status({ status: 'failed', sequence: 9, error: { code: 'step_failed', message: 'x', retryable: false } }));
    expect((await ended).map((o) => [o.requestId, o.status, o.code])).toEqual([
      ['first', 'failed', 'step_failed'],
      ['again', 'failed', 'step_failed'],
    ]);
  });

  it("ignores other producers' requests and runs", () => {
    const book = new OutcomeBook(10);
    book.record(status({ requestId: 'someone-else' }));
    book.record(status({ runId: 'run-9', status: 'completed', sequence: 5 }));
    expect(book.size).toBe(0);
  });

  it('times a wait out with the last outcome seen', async () => {
    const book = new OutcomeBook(10);
    book.track('req-1');
    book.record(status({ requestId: 'req-1', status: 'deferred', error: { code: 'rate_limited', message: 'x', retryable: true }, retryAfterSec: 3 }));
    const err = await book.wait('req-1', 'admission', 20).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OutcomeTimeoutError);
    expect(err).toMatchObject({ requestId: 'req-1', timeoutMs: 20, last: { status: 'deferred', retryAfterSec: 3 } });
  });

  it('forgets the oldest request past its bound, ending its waits', async () => {
    const book = new OutcomeBook(2);
    book.track('a');
    const waiting = book.wait('a', 'answer', 1_000).catch((e: unknown) => e);
    book.track('b');
    book.track('c');
    expect(book.size).toBe(2);
    expect(await waiting).toBeInstanceOf(UnknownRequestError);
    await expect(book.wait('a', 'answer', 10)).rejects.toBeInstanceOf(UnknownRequestError);
    await expect(book.wait('never', 'answer', 10)).rejects.toBeInstanceOf(UnknownRequestError);
  });

  it('ends every wait when outcomes can no longer come', async () => {
    const book = new OutcomeBook(10);
    book.track('req-1');
    const waiting = book.wait('req-1', 'terminal', 1_000);
    book.fail(new OutcomeUnavailableError('closed'));
    await expect(waiting).rejects.toBeInstanceOf(OutcomeUnavailableError);
    await expect(book.wait('req-1', 'terminal', 1_000)).rejects.toBeInstanceOf(OutcomeUnavailableError);
  });
});
