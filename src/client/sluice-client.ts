import { randomUUID } from 'node:crypto';
import { readBodyText } from './bounded-body.js';
import { ResponseTooLargeError, SluiceHttpError, SluiceRefusal, SseEventTooLargeError, failureOf } from './errors.js';
import { DEFAULT_RECONNECT, NO_RETRY, checkSubmitRetry, reconnectWaitMs, submitRetryWaitMs, type Reconnect, type SubmitRetry } from './retry-policy.js';
import { SseParser, type SseMessage } from './sse-parser.js';
import { TERMINAL_RUN_STATUSES, type CancelRequested, type Run, type RunClass, type RunEvent, type SubmittedRun } from './types.js';

export interface SluiceClientOptions {
  /** Where Sluice's API listens, e.g. `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** A tenant's API key: it decides the tenant. */
  apiKey: string;
  /**
   * The limit of each HTTP call; on an event stream, the longest silence before the connection
   * counts as lost (Sluice sends a keep-alive every 15 s). Default 30 s.
   */
  timeoutMs?: number;
  fetch?: typeof fetch;
  /** The longest SSE event accepted, in bytes (a terminal event carries the run's result). Default 4 MiB. */
  maxEventBytes?: number;
  /**
   * The most of any response body read, in bytes: a longer success body fails the call with
   * ResponseTooLargeError, a longer error body is read only this far; the rest is never fetched.
   * Default 4 MiB, as `maxEventBytes`.
   */
  maxResponseBytes?: number;
  /** How an event stream reconnects after losing its connection. */
  reconnect?: Partial<Reconnect>;
  /** Source of the retry and reconnect spread, in [0, 1); injectable so tests are deterministic. */
  random?: () => number;
}

export interface CallOptions {
  signal?: AbortSignal;
}

export interface SubmitRequest extends CallOptions {
  workflow: string;
  input: unknown;
  class?: RunClass;
  /** The run's time budget from admission; also the limit of this call's retries, from its first attempt. */
  deadlineMs?: number;
  /** Sent on every attempt; a UUID when not given, so the client's own retries never start a second run. */
  idempotencyKey?: string;
  /** Retries of refusals that say when to come back (Retry-After). Default: one attempt, no retry. */
  retry?: SubmitRetry;
}

export interface EventsOptions extends CallOptions {
  /** Start after this event (a sequence number), as a reconnect would. */
  lastEventId?: number | string;
}

export interface WaitOptions extends CallOptions {
  /** The whole wait, stream and final read included. */
  timeoutMs: number;
}

const DEFAULT_TIMEOUT_MS = 30_000;
const DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024;
// A run read whole carries the same result as its terminal event.
const DEFAULT_MAX_RESPONSE_BYTES = DEFAULT_MAX_EVENT_BYTES;

/** How a connection of an event stream ended without an error. */
type StreamEnd = 'dropped' | 'nothing_left';

/** A typed client of Sluice's HTTP API (docs/contract.md, "HTTP"). */
export class SluiceClient {
  private readonly baseUrl: string;
  private readonly apiKey: string;
  private readonly timeoutMs: number;
  private readonly fetch: typeof fetch;
  private readonly maxEventBytes: number;
  private readonly maxResponseBytes: number;
  private readonly reconnect: Reconnect;
  private readonly random: () => number;

  constructor(opts: SluiceClientOptions) {
    this.baseUrl = opts.baseUrl.replace(/\/+$/, '');
    this.apiKey = opts.apiKey;
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.fetch = opts.fetch ?? globalThis.fetch;
    this.maxEventBytes = opts.maxEventBytes ?? DEFAULT_MAX_EVENT_BYTES;
    this.maxResponseBytes = opts.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
    if (!(Number.isSafeInteger(this.maxResponseBytes) && this.maxResponseBytes > 0)) throw new RangeError('maxResponseBytes must be a positive whole number of bytes');
    this.reconnect = { ...DEFAULT_RECONNECT, ...opts.reconnect };
    this.random = opts.random ?? Math.random;
  }

  /**
   * `POST /v1/runs`. A refusal is retried only within `retry`, after the wait Sluice asked for (spread a little, see retry-policy.ts),
   * with the same Idempotency-Key; otherwise it is thrown as a SluiceRefusal.
   */
  async submit(req: SubmitRequest): Promise<SubmittedRun> {
    const retry = checkSubmitRetry(req.retry ?? NO_RETRY);
    const idempotencyKey = req.idempotencyKey ?? randomUUID();
    const body = JSON.stringify({ workflow: req.workflow, input: req.input, class: req.class, deadlineMs: req.deadlineMs });
    const startedAt = Date.now();
    let waitedMs = 0;
    for (let attempt = 1; ; attempt++) {
      try {
        const answer = await this.call<Omit<SubmittedRun, 'queued' | 'idempotencyKey' | 'idempotentReplayed'>>('POST', '/v1/runs', {
          body,
          headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
          signal: req.signal,
        });
        return { ...answer.body, queued: answer.body.admission === 'queued', idempotencyKey, idempotentReplayed: answer.headers.get('idempotent-replayed') === 'true' };
      } catch (err) {
        if (!(err instanceof SluiceRefusal)) throw err;
        const waitMs = submitRetryWaitMs({ attempt, retryable: err.retryable, retryAfterSec: err.retryAfterSec, waitedMs, elapsedMs: Date.now() - startedAt }, retry, req.deadlineMs, this.random);
        if (waitMs === undefined) throw err;
        await sleep(waitMs, req.signal);
        waitedMs += waitMs;
      }
    }
  }

  /** `GET /v1/runs/:id`. */
  async get(runId: string, opts: CallOptions = {}): Promise<Run> {
    return (await this.call<Run>('GET', runPath(runId), opts)).body;
  }

  /** `DELETE /v1/runs/:id`: queued work never starts, running work stops at its next step boundary. */
  async cancel(runId: string, opts: CallOptions = {}): Promise<CancelRequested> {
    return (await this.call<CancelRequested>('DELETE', runPath(runId), opts)).body;
  }

  /**
   * The run's status events from `GET /v1/runs/:id/events`, ending after its terminal status. A
   * lost connection is resumed after the last event received (Last-Event-ID), a bounded number of
   * times in a row; an event is never yielded twice.
   */
  async *events(runId: string, opts: EventsOptions = {}): AsyncGenerator<RunEvent, void, undefined> {
    let lastEventId = opts.lastEventId === undefined ? '' : String(opts.lastEventId);
    let serverRetryMs: number | undefined;
    let failures = 0;
    for (;;) {
      const parser = new SseParser(this.maxEventBytes);
      parser.lastEventId = lastEventId;
      parser.retryMs = serverRetryMs;
      let lost: unknown;
      let retryAfterSec: number | undefined;
      try {
        const stream = this.connect(runId, parser, opts.signal);
        try {
          let next = await stream.next();
          for (; !next.done; next = await stream.next()) {
            failures = 0;
            lastEventId = next.value.id;
            if (next.value.event !== 'status') continue;
            const event = JSON.parse(next.value.data) as RunEvent;
            yield event;
            if (TERMINAL_RUN_STATUSES.has(event.status)) return;
          }
          if (next.value === 'nothing_left') return;
        } finally {
          // Closes the connection when the caller stops early, or when this stream is done with it.
          await stream.return('dropped');
        }
      } catch (err) {
        if (opts.signal?.aborted || err instanceof SseEventTooLargeError || err instanceof SyntaxError) throw err;
        if (err instanceof SluiceHttpError && !(err instanceof SluiceRefusal && err.retryable)) throw err;
        lost = err;
        if (err instanceof SluiceRefusal) retryAfterSec = err.retryAfterSec;
      }
      lastEventId = parser.lastEventId;
      serverRetryMs = parser.retryMs;
      failures += 1;
      const waitMs = reconnectWaitMs(failures, this.reconnect, serverRetryMs, retryAfterSec, this.random);
      if (waitMs === undefined) throw new Error(`the event stream of run ${runId} was lost ${failures - 1} times in a row`, { cause: lost });
      await sleep(waitMs, opts.signal);
    }
  }

  /** Follows the run's events to its terminal status and returns the run as it ended. */
  async waitForResult(runId: string, opts: WaitOptions): Promise<Run> {
    const signal = withCallerSignal(AbortSignal.timeout(opts.timeoutMs), opts.signal);
    for await (const event of this.events(runId, { signal })) void event;
    return this.get(runId, { signal });
  }

  private async call<T>(method: string, path: string, opts: CallOptions & { body?: string; headers?: Record<string, string> }): Promise<{ body: T; headers: Headers }> {
    const res = await this.fetch(this.baseUrl + path, {
      method,
      headers: { accept: 'application/json', authorization: `Bearer ${this.apiKey}`, ...opts.headers },
      body: opts.body,
      signal: withCallerSignal(AbortSignal.timeout(this.timeoutMs), opts.signal),
    });
    const { text, complete } = await readBodyText(res, this.maxResponseBytes);
    if (!res.ok) throw failureOf(res.status, res.headers, text, Date.now());
    if (!complete) throw new ResponseTooLargeError(res.status, this.maxResponseBytes);
    return { body: JSON.parse(text) as T, headers: res.headers };
  }

  /**
   * One connection of an event stream: yields its messages, and returns how it ended. Silence
   * longer than the timeout aborts it, as a lost connection.
   */
  private async *connect(runId: string, parser: SseParser, signal: AbortSignal | undefined): AsyncGenerator<SseMessage, StreamEnd, undefined> {
    const connection = new AbortController();
    let silence: ReturnType<typeof setTimeout> | undefined;
    const heard = () => {
      clearTimeout(silence);
      silence = setTimeout(() => connection.abort(new Error(`nothing arrived on the event stream for ${this.timeoutMs} ms`)), this.timeoutMs);
    };
    try {
      heard();
      const headers: Record<string, string> = { accept: 'text/event-stream', authorization: `Bearer ${this.apiKey}` };
      if (parser.lastEventId !== '') headers['last-event-id'] = parser.lastEventId;
      const res = await this.fetch(`${this.baseUrl}${runPath(runId)}/events`, { headers, signal: withCallerSignal(connection.signal, signal) });
      // 204: the run is over and nothing is left after Last-Event-ID.
      if (res.status === 204) return 'nothing_left';
      if (res.status !== 200) throw failureOf(res.status, res.headers, (await readBodyText(res, this.maxResponseBytes)).text, Date.now());
      if (!res.headers.get('content-type')?.startsWith('text/event-stream')) throw new SluiceHttpError(`expected an event stream, got ${res.headers.get('content-type')}`, res.status, '');
      if (!res.body) return 'dropped';
      for await (const chunk of res.body) {
        heard();
        yield* parser.push(chunk);
      }
      return 'dropped';
    } finally {
      clearTimeout(silence);
      connection.abort();
    }
  }
}

function runPath(runId: string): string {
  return `/v1/runs/${encodeURIComponent(runId)}`;
}

function withCallerSignal(own: AbortSignal, caller: AbortSignal | undefined): AbortSignal {
  return caller ? AbortSignal.any([own, caller]) : own;
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
