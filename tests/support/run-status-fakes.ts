import { EventEmitter } from 'node:events';
import type { Notification } from 'pg';
import type { BucketTake } from '../../src/admission/local-token-bucket.js';
import { ReadLimits } from '../../src/admission/read-limits.js';
import type { ApiDeps } from '../../src/api/server.js';
import { loadConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/obs/logger.js';
import { createMetrics, type Metrics } from '../../src/obs/metrics.js';
import { RunEventFeed, type ListenConnection } from '../../src/status/run-event-feed.js';
import type { RunEventView, RunView } from '../../src/status/run-store.js';

/** A pg client stand-in for the feed: tests drive its notifications and its failures. */
export class FakeListenConnection extends EventEmitter {
  readonly queries: string[] = [];
  ended = false;

  constructor(private readonly failConnect = false) {
    super();
  }

  async connect(): Promise<void> {
    if (this.failConnect) throw new Error('connection refused');
  }

  async query(text: string): Promise<void> {
    this.queries.push(text);
  }

  async end(): Promise<void> {
    if (this.ended) return;
    this.ended = true;
    this.emit('end');
  }

  notify(runId: string): void {
    this.emit('notification', { processId: 1, channel: 'sluice_run_events', payload: runId } satisfies Notification);
  }

  asClient(): ListenConnection {
    return this as unknown as ListenConnection;
  }
}

/** What the read bucket answers next: a take, or an error as an unreachable Redis gives. */
export type ReadBucketAnswer = BucketTake | Error;

export const POSTGRES_DOWN = 'connect ECONNREFUSED 127.0.0.1:5432';

export interface FakeRunStatus {
  deps: ApiDeps['runStatus'];
  /** The real read limits over a scripted bucket store (`readBucket`). */
  reads: ReadLimits;
  metrics: Metrics;
  feed: RunEventFeed;
  /** Answer of every read-bucket take from now on; allowed by default. */
  readBucket: ReadBucketAnswer;
  readTakes: number;
  /** While true every read of the run store fails, as with Postgres unreachable. */
  postgresDown: boolean;
  getRunCalls: number;
  /** Connections the feed opened, newest last. */
  connections: FakeListenConnection[];
  cancelRequests: Array<{ runId: string; deadline: number }>;
  listEventsCalls: number;
  addRun(tenantId: string, view: RunView, events?: RunEventView[]): void;
  /** Appends an event to the read model, as the status sink's commit would. */
  append(event: RunEventView): void;
}

/**
 * An in-memory read model, a real feed over fake connections, a recording cancellation store, and
 * the real read limits (the local config's, `maxStreams` per tenant when given) over a scripted bucket.
 */
export function fakeRunStatus(opts: { maxSubscribers?: number; failRequest?: boolean; maxStreams?: number; now?: () => number } = {}): FakeRunStatus {
  const runs = new Map<string, { tenantId: string; view: RunView }>();
  const events = new Map<string, RunEventView[]>();
  const connections: FakeListenConnection[] = [];
  const feed = new RunEventFeed({
    connect: () => {
      const c = new FakeListenConnection();
      connections.push(c);
      return c.asClient();
    },
    logger: createLogger('silent'),
    maxSubscribers: opts.maxSubscribers,
  });
  const config = loadConfig({ env: {} });
  if (opts.maxStreams !== undefined) for (const t of Object.values(config.tenants)) t.reads.maxStreams = opts.maxStreams;
  const metrics = createMetrics();
  const reads = new ReadLimits({
    config,
    metrics,
    logger: createLogger('silent'),
    now: opts.now,
    store: {
      takeReadToken: async () => {
        fake.readTakes++;
        if (fake.readBucket instanceof Error) throw fake.readBucket;
        return fake.readBucket;
      },
    },
  });
  const fake: FakeRunStatus = {
    feed,
    reads,
    metrics,
    readBucket: { allowed: true, tokensLeft: 1, waitMs: 0 },
    readTakes: 0,
    postgresDown: false,
    getRunCalls: 0,
    connections,
    cancelRequests: [],
    listEventsCalls: 0,
    deps: {
      feed,
      runs: {
        getRun: async (runId, tenantId) => {
          fake.getRunCalls++;
          if (fake.postgresDown) throw new Error(POSTGRES_DOWN);
          const entry = runs.get(runId);
          return entry && entry.tenantId === tenantId ? entry.view : undefined;
        },
        listEvents: async (runId, tenantId, after, limit) => {
          fake.listEventsCalls++;
          if (fake.postgresDown) throw new Error(POSTGRES_DOWN);
          if (runs.get(runId)?.tenantId !== tenantId) return [];
          return (events.get(runId) ?? []).filter((e) => e.sequence > after).slice(0, limit);
        },
      },
      cancellations: {
        request: async (runId, deadline) => {
          if (opts.failRequest) throw new Error('redis down');
          fake.cancelRequests.push({ runId, deadline });
        },
      },
    },
    addRun(tenantId, view, initial = []) {
      runs.set(view.runId, { tenantId, view });
      events.set(view.runId, [...initial]);
    },
    append(event) {
      events.get(event.runId)!.push(event);
    },
  };
  return fake;
}
