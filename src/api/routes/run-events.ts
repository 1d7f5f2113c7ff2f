import { PassThrough } from 'node:stream';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type { ReadLimits } from '../../admission/read-limits.js';
import type { Metrics } from '../../obs/metrics.js';
import type { RunEventFeed } from '../../status/run-event-feed.js';
import { isTerminal } from '../../status/run-history.js';
import type { RunEventView, RunStore } from '../../status/run-store.js';
import { sendProblem } from '../problem.js';
import { formatSseComment, formatSseEvent, parseLastEventId } from '../sse.js';
import { findOwnRun, runStoreUnavailable, type OwnRunDeps } from './own-run.js';

export interface RunEventRouteDeps extends OwnRunDeps {
  runs: Pick<RunStore, 'getRun' | 'listEvents'>;
  /** Each connect takes a read token; each open stream holds one of its tenant's stream slots. */
  reads: Pick<ReadLimits, 'take' | 'openStream'>;
  /** Wakes streams on new events; its subscriber bound is this instance's stream bound. */
  feed: Pick<RunEventFeed, 'subscribe'>;
  metrics: Metrics;
  heartbeatMs?: number;
  /** Safety net for a lost notification: each open stream also reads Postgres this often. */
  pollMs?: number;
  now?: () => number;
}

const PAGE_SIZE = 100;
/** A run that is not terminal this long after its deadline is stuck; its stream stops waiting. */
export const STREAM_LINGER_AFTER_DEADLINE_MS = 5 * 60_000;
const FULL_RETRY_AFTER_SEC = 5;
/** Node fires longer timers at once; deadlines are bounded far below this anyway. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Streams one run's transitions to one client. Wake-ups (notification, poll) are coalesced so at
 * most one read runs at a time, and each read continues after the last id sent, so an event is
 * never sent twice or skipped however the wake-ups interleave.
 */
class RunEventStream {
  readonly body = new PassThrough();
  private after: number;
  private started = false;
  private reading = false;
  private rerun = false;
  private readonly timers: NodeJS.Timeout[] = [];

  constructor(
    private readonly runId: string,
    private readonly tenantId: string,
    after: number,
    private readonly runs: RunEventRouteDeps['runs'],
    private readonly log: FastifyBaseLogger,
  ) {
    this.after = after;
    this.body.once('close', () => this.timers.forEach(clearTimeout));
  }

  read(): Promise<RunEventView[]> {
    return this.runs.listEvents(this.runId, this.tenantId, this.after, PAGE_SIZE);
  }

  start(first: RunEventView[], opts: { heartbeatMs: number; pollMs: number; lifetimeMs: number }): void {
    // Something to write at once, so the client sees the response headers without waiting for an event.
    if (first.length === 0) this.write(formatSseComment('waiting for the next status'));
    if (this.send(first) === 'ended') return;
    this.timers.push(
      setInterval(() => this.write(formatSseComment('keepalive')), opts.heartbeatMs),
      setInterval(() => this.wake(), opts.pollMs),
      setTimeout(() => this.end(), Math.min(MAX_TIMER_MS, Math.max(0, opts.lifetimeMs))),
    );
    this.started = true;
    if (first.length === PAGE_SIZE || this.rerun) this.wake();
  }

  wake(): void {
    if (!this.started || this.reading) {
      this.rerun = true;
      return;
    }
    if (this.isClosed()) return;
    this.reading = true;
    this.rerun = false;
    void this.readAll().finally(() => {
      this.reading = false;
      if (this.rerun) this.wake();
    });
  }

  end(): void {
    if (!this.isClosed()) this.body.end();
  }

  private async readAll(): Promise<void> {
    try {
      for (;;) {
        const events = await this.read();
        if (this.send(events) === 'ended' || events.length < PAGE_SIZE) return;
      }
    } catch (err) {
      this.log.warn({ err, runId: this.runId }, 'could not read run events; the next poll tries again');
    }
  }

  private send(events: RunEventView[]): 'ended' | 'open' {
    for (const e of events) {
      if (this.isClosed()) return 'ended';
      this.write(formatSseEvent({ id: e.sequence, event: 'status', data: JSON.stringify(e) }));
      this.after = e.sequence;
      if (isTerminal(e.status)) {
        this.end();
        return 'ended';
      }
    }
    return 'open';
  }

  private write(frame: string): void {
    if (!this.isClosed()) this.body.write(frame);
  }

  private isClosed(): boolean {
    return this.body.writableEnded || this.body.destroyed;
  }
}

/**
 * `GET /v1/runs/:id/events`: the run's status transitions from Postgres as Server-Sent Events,
 * `id` = sequence number. Resumes after `Last-Event-ID` (or `?lastEventId=` for a first connect),
 * ends after a terminal status, and answers 204 when there is nothing left to stream, which tells
 * EventSource clients to stop reconnecting.
 */
export function registerRunEventRoutes(app: FastifyInstance, deps: RunEventRouteDeps): void {
  const heartbeatMs = deps.heartbeatMs ?? 15_000;
  const pollMs = deps.pollMs ?? 2_000;
  const now = deps.now ?? Date.now;
  const open = new Set<RunEventStream>();

  // Open streams would hold the server's close for as long as their runs last.
  app.addHook('preClose', async () => {
    for (const stream of open) stream.end();
  });

  // One lastEventId at most: a repeated parameter arrives as a list, which is not an event id.
  const schema = { querystring: { type: 'object', properties: { lastEventId: { type: 'string' } } } } as const;
  app.get<{ Params: { id: string }; Querystring: { lastEventId?: string } }>('/v1/runs/:id/events', { schema }, async (req, reply) => {
    const own = await findOwnRun(req, reply, deps, req.params.id);
    if (!own) return reply;
    const { tenantId, view } = own;

    const header = req.headers['last-event-id'];
    const fromHeader = typeof header === 'string';
    const lastId = parseLastEventId(fromHeader ? header : req.query.lastEventId);
    if (!lastId.ok) {
      const path = fromHeader ? '/headers/last-event-id' : '/query/lastEventId';
      return sendProblem(reply, 'invalid_request', { detail: `Last-Event-ID ${lastId.message}`, errors: [{ path, message: lastId.message }] });
    }

    const slot = deps.reads.openStream(tenantId);
    if (!slot.granted) return sendProblem(reply, 'rate_limited', slot.refusal);
    const stream = new RunEventStream(view.runId, tenantId, lastId.after ?? -1, deps.runs, req.log);
    // Subscribed before the first read, so an event committed in between still wakes the stream.
    const unsubscribe = deps.feed.subscribe(view.runId, () => stream.wake());
    if (!unsubscribe) {
      slot.release();
      return sendProblem(reply, 'overloaded', { detail: 'this instance has as many event streams open as it serves', retryAfterSec: FULL_RETRY_AFTER_SEC });
    }
    const letGo = () => {
      unsubscribe();
      slot.release();
    };

    let first: RunEventView[];
    try {
      first = await stream.read();
    } catch (err) {
      letGo();
      return runStoreUnavailable(req, reply, err);
    }
    const lifetimeMs = Date.parse(view.deadline) + STREAM_LINGER_AFTER_DEADLINE_MS - now();
    if (first.length === 0 && (isTerminal(view.status) || lifetimeMs <= 0)) {
      letGo();
      return reply.code(204).send();
    }

    open.add(stream);
    deps.metrics.sseStreams.inc();
    stream.body.once('close', () => {
      letGo();
      open.delete(stream);
      deps.metrics.sseStreams.dec();
    });
    stream.start(first, { heartbeatMs, pollMs, lifetimeMs });
    return reply
      .code(200)
      .header('content-type', 'text/event-stream; charset=utf-8')
      .header('cache-control', 'no-cache')
      // A buffering proxy (nginx) would otherwise hold progress back until the stream ended.
      .header('x-accel-buffering', 'no')
      .send(stream.body);
  });
}
