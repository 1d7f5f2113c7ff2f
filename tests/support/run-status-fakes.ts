import { EventEmitter } from 'node:events';
import type { Notification } from 'pg';
import type { ApiDeps } from '../../src/api/server.js';
import { createLogger } from '../../src/obs/logger.js';
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

export interface FakeRunStatus {
  deps: ApiDeps['runStatus'];
  feed: RunEventFeed;
  /** Connections the feed opened, newest last. */
  connections: FakeListenConnection[];
  cancelRequests: Array<{ runId: string; deadline: number }>;
  listEventsCalls: number;
  addRun(tenantId: string, view: RunView, events?: RunEventView[]): void;
  /** Appends an event to the read model, as the status sink's commit would. */
  append(event: RunEventView): void;
}

/** An in-memory read model, a real feed over fake connections, and a recording cancellation store. */
export function fakeRunStatus(opts: { maxSubscribers?: number; failRequest?: boolean } = {}): FakeRunStatus {
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
  const fake: FakeRunStatus = {
    feed,
    connections,
    cancelRequests: [],
    listEventsCalls: 0,
    deps: {
      feed,
      runs: {
        getRun: async (runId, tenantId) => {
          const entry = runs.get(runId);
          return entry && entry.tenantId === tenantId ? entry.view : undefined;
        },
        listEvents: async (runId, tenantId, after, limit) => {
          fake.listEventsCalls++;
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
