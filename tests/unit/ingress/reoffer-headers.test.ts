import { describe, expect, it } from 'vitest';
import { REOFFER_HEADER, reofferHeaders } from '../../../src/ingress/ingress-consumer.js';
import { isIngressRetry, parseRetryDueAt, RETRY_HEADER } from '../../../src/retries/retry-headers.js';

describe('reofferHeaders: a deferred request on the retry topic', () => {
  it("keeps the producer's headers, so the signature still holds, and adds when and where it goes back", () => {
    const headers = reofferHeaders({ 'sluice-signature': Buffer.from('ab'.repeat(32)), traceparent: '00-1-2-01' }, 'run-1', 1_234);
    expect(headers).toEqual({ 'sluice-signature': 'ab'.repeat(32), traceparent: '00-1-2-01', [RETRY_HEADER.dueAt]: '1234', [RETRY_HEADER.destination]: 'ingress', [REOFFER_HEADER]: 'run-1' });
    expect(isIngressRetry(headers)).toBe(true);
    expect(parseRetryDueAt(headers)).toBe(1_234);
  });

  it('replaces the scheduling headers a producer or an earlier deferral set', () => {
    const headers = reofferHeaders({ [RETRY_HEADER.dueAt]: '1', [RETRY_HEADER.class]: 'batch', [REOFFER_HEADER]: 'someone-else' }, 'run-2', 99);
    expect(headers).toEqual({ [RETRY_HEADER.dueAt]: '99', [RETRY_HEADER.destination]: 'ingress', [REOFFER_HEADER]: 'run-2' });
  });

  it('a run retry is not an ingress retry', () => {
    expect(isIngressRetry({ [RETRY_HEADER.dueAt]: '1', [RETRY_HEADER.class]: 'batch' })).toBe(false);
    expect(isIngressRetry({ [RETRY_HEADER.destination]: 'interactive' })).toBe(false);
  });
});
