import { describe, expect, it } from 'vitest';
import { statusEvent } from './status-event.js';
import { statusRequestId } from '../../../src/events/ingress-request-id.js';
import { OutcomeBook } from '../../../src/producers/outcome-book.js';
import { OutcomeTimeoutError, OutcomeUnavailableError, UnknownRequestError } from '../../../src/producers/producer-errors.js';

const status = statusEvent;
/** Tenant-a's request id as the ingress writes it on a status. */
const answering = (requestId: string) => statusRequestId('tenant-a', requestId);

describe('the outcome book', () => {
  it("resolves a wait when its request's answer and then its run's end come", async () => {
    const book = new OutcomeBook('tenant-a', 10);
    book.track('req-1');
    const admitted = book.wait('req-1', 'admission', 1_000);
    const ended = book.wait('req-1', 'terminal', 1_000);
    book.record(status({ requestId: answering('req-1') }));
    expect(await admitted).toMatchObject({ requestId: 'req-1', runId: 'run-1', status: 'queued' });
    book.record(status({ status: 'completed', sequence: 7 }));
    expect(await ended).toMatchObject({ requestId: 'req-1', status: 'completed' });
    // Known outcomes answer at once.
    expect(await book.wait('req-1', 'admission', 1)).toMatchObject({ status: 'queued' });
  });

  it("follows a duplicate's request to the run it shares with the first", async () => {
    const book = new OutcomeBook('tenant-a', 10);
    book.track('first');
    book.track('again');
    book.record(status({ requestId: answering('first') }));
    book.record(status({ requestId: answering('again') }));
    const ended = Promise.all([book.wait('first', 'terminal', 1_000), book.wait('again', 'terminal', 1_000)]);
    book.record(status({ status: 'failed', sequence: 9, error: { code: 'step_failed', message: 'x', retryable: false } }));
    expect((await ended).map((o) => [o.requestId, o.status, o.code])).toEqual([
      ['first', 'failed', 'step_failed'],
      ['again', 'failed', 'step_failed'],
    ]);
  });

  it("ignores other producers' requests and runs", () => {
    const book = new OutcomeBook('tenant-a', 10);
    book.record(status({ requestId: answering('someone-else') }));
    book.record(status({ runId: 'run-9', status: 'completed', sequence: 5 }));
    expect(book.size).toBe(0);
  });

  it("hears its own tenant only: another tenant's answer under this producer's request id, or a status of its run, is not this producer's", async () => {
    const book = new OutcomeBook('tenant-a', 10);
    book.track('req-1');
    const answered = book.wait('req-1', 'answer', 1_000);
    // Tenant-b submitted with tenant-a's request id: its answer names tenant-b, whichever way its id is written.
    book.record(status({ tenantId: 'tenant-b', runId: 'run-b', requestId: statusRequestId('tenant-b', 'req-1') }));
    book.record(status({ tenantId: 'tenant-b', runId: 'run-b', requestId: 'req-1' }));
    book.record(status({ tenantId: 'tenant-b', runId: 'run-b', requestId: answering('req-1') }));
    book.record(status({ requestId: answering('req-1') }));
    expect(await answered).toMatchObject({ requestId: 'req-1', runId: 'run-1' });
    const ended = book.wait('req-1', 'terminal', 50);
    book.record(status({ tenantId: 'tenant-b', status: 'completed', sequence: 7 }));
    await expect(ended).rejects.toBeInstanceOf(OutcomeTimeoutError);
  });

  it("takes its tenant's answer with the request id as an older ingress wrote it, without the tenant", async () => {
    const book = new OutcomeBook('tenant-a', 10);
    book.track('req-1');
    book.record(status({ requestId: 'req-1' }));
    expect(await book.wait('req-1', 'answer', 1)).toMatchObject({ requestId: 'req-1', runId: 'run-1' });
  });

  it('times a wait out with the last outcome seen', async () => {
    const book = new OutcomeBook('tenant-a', 10);
    book.track('req-1');
    book.record(status({ requestId: answering('req-1'), status: 'deferred', error: { code: 'rate_limited', message: 'x', retryable: true }, retryAfterSec: 3 }));
    const err = await book.wait('req-1', 'admission', 20).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OutcomeTimeoutError);
    expect(err).toMatchObject({ requestId: 'req-1', timeoutMs: 20, last: { status: 'deferred', retryAfterSec: 3 } });
  });

  it('forgets the oldest request past its bound, ending its waits', async () => {
    const book = new OutcomeBook('tenant-a', 2);
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
    const book = new OutcomeBook('tenant-a', 10);
    book.track('req-1');
    const waiting = book.wait('req-1', 'terminal', 1_000);
    book.fail(new OutcomeUnavailableError('closed'));
    await expect(waiting).rejects.toBeInstanceOf(OutcomeUnavailableError);
    await expect(book.wait('req-1', 'terminal', 1_000)).rejects.toBeInstanceOf(OutcomeUnavailableError);
  });
});
