import { ownRequestId } from '../events/ingress-request-id.js';
import type { RunStatusChanged } from '../events/schemas.js';
import { OutcomeTimeoutError, OutcomeUnavailableError, UnknownRequestError } from './producer-errors.js';
import { outcomeAt, outcomeOf, progressWith, type OutcomeStage, type RequestProgress, type SubmissionOutcome } from './submission.js';

interface Waiter {
  stage: OutcomeStage;
  resolve: (o: SubmissionOutcome) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

interface Tracked extends RequestProgress {
  runIds: Set<string>;
  waiters: Set<Waiter>;
}

/**
 * The outcomes of the requests one producer submitted, as the status topic tells them, and the
 * callers waiting for them. Memory is bounded: at most `maxTracked` requests, the oldest forgotten
 * first (a caller still waiting on one gets UnknownRequestError); status events of other
 * producers' requests and of runs not theirs are dropped as they are read. Every tenant's statuses
 * share the topic and request ids are the producers' to choose, so only the producer's own
 * tenant's statuses count: another tenant submitting with this producer's request id is not heard.
 */
export class OutcomeBook {
  private readonly requests = new Map<string, Tracked>();
  /** Run id → the requests it answers (a duplicate's request shares the first one's run). */
  private readonly byRun = new Map<string, Set<string>>();
  private failure: Error | undefined;

  constructor(
    private readonly tenantId: string,
    private readonly maxTracked: number,
  ) {}

  get size(): number {
    return this.requests.size;
  }

  track(requestId: string): void {
    if (this.requests.has(requestId)) return;
    this.requests.set(requestId, { runIds: new Set(), waiters: new Set() });
    for (const oldest of this.requests.keys()) {
      if (this.requests.size <= this.maxTracked) break;
      this.forget(oldest);
    }
  }

  /** A status event: an answer to a tracked request, or a later status of a tracked request's run. */
  record(e: RunStatusChanged): void {
    if (e.tenantId !== this.tenantId) return;
    const own = ownRequestId(this.tenantId, e);
    const answered = own !== undefined && this.requests.has(own);
    const ids = answered ? [own] : [...(this.byRun.get(e.runId) ?? [])];
    for (const requestId of ids) {
      const t = this.requests.get(requestId)!;
      if (answered) this.link(requestId, t, e.runId);
      Object.assign(t, progressWith(t, outcomeOf(requestId, e), answered));
      for (const w of t.waiters) {
        const outcome = outcomeAt(t, w.stage);
        if (outcome) this.settle(t, w, () => w.resolve(outcome));
      }
    }
  }

  /** The request's outcome at `stage`: at once if known, else when it comes, within `timeoutMs`. */
  wait(requestId: string, stage: OutcomeStage, timeoutMs: number): Promise<SubmissionOutcome> {
    if (this.failure) return Promise.reject(this.failure);
    const t = this.requests.get(requestId);
    if (!t) return Promise.reject(new UnknownRequestError(requestId));
    const known = outcomeAt(t, stage);
    if (known) return Promise.resolve(known);
    return new Promise((resolve, reject) => {
      const w: Waiter = {
        stage,
        resolve,
        reject,
        timer: setTimeout(() => this.settle(t, w, () => reject(new OutcomeTimeoutError(requestId, timeoutMs, t.latest ?? t.answer))), timeoutMs),
      };
      t.waiters.add(w);
    });
  }

  /** Outcomes can no longer come (the status consumer failed, or the producer closed): every wait ends with `err`. */
  fail(err: OutcomeUnavailableError): void {
    this.failure = err;
    for (const t of this.requests.values()) for (const w of t.waiters) this.settle(t, w, () => w.reject(err));
  }

  private link(requestId: string, t: Tracked, runId: string): void {
    t.runIds.add(runId);
    const ids = this.byRun.get(runId);
    if (ids) ids.add(requestId);
    else this.byRun.set(runId, new Set([requestId]));
  }

  private forget(requestId: string): void {
    const t = this.requests.get(requestId)!;
    this.requests.delete(requestId);
    for (const runId of t.runIds) {
      const ids = this.byRun.get(runId)!;
      ids.delete(requestId);
      if (ids.size === 0) this.byRun.delete(runId);
    }
    for (const w of t.waiters) this.settle(t, w, () => w.reject(new UnknownRequestError(requestId)));
  }

  private settle(t: Tracked, w: Waiter, done: () => void): void {
    clearTimeout(w.timer);
    t.waiters.delete(w);
    done();
  }
}
