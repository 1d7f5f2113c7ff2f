/**
 * What the demo learns from the HTTP attempts it watched: whether each retry of a refused
 * submission came no sooner than the Retry-After it was refused with. Plain functions over the
 * record, so the judgement is tested apart from the network.
 */

/** One `POST /v1/runs` as the demo's fetch saw it. */
export interface Attempt {
  idempotencyKey: string;
  sentAt: number;
  answeredAt: number;
  status: number;
  /** The `Retry-After` header in seconds, when the answer had one. */
  retryAfterSec: number | undefined;
}

/** A retry and the wait before it, against the wait Sluice asked for. */
export interface RetryWait {
  idempotencyKey: string;
  askedSec: number;
  waitedMs: number;
  honoured: boolean;
}

/** Every retry in the record (a request sent again under a key whose previous attempt was refused with Retry-After). */
export function retryWaits(attempts: readonly Attempt[]): RetryWait[] {
  const byKey = new Map<string, Attempt[]>();
  for (const a of attempts) byKey.set(a.idempotencyKey, [...(byKey.get(a.idempotencyKey) ?? []), a]);
  const waits: RetryWait[] = [];
  for (const [idempotencyKey, tries] of byKey) {
    const inOrder = [...tries].sort((x, y) => x.sentAt - y.sentAt);
    for (let i = 1; i < inOrder.length; i++) {
      const refused = inOrder[i - 1]!;
      if (refused.retryAfterSec === undefined) continue;
      const waitedMs = inOrder[i]!.sentAt - refused.answeredAt;
      waits.push({ idempotencyKey, askedSec: refused.retryAfterSec, waitedMs, honoured: waitedMs >= refused.retryAfterSec * 1000 });
    }
  }
  return waits;
}
