/**
 * A scenario's clients: open-loop sends at the scheduled times (src/dev/bench/scenarios/arrivals.ts),
 * whatever the answers, and per request the client's retries (client-policy.ts). Every send is
 * recorded with its times, measured in ms from the run's start; a send's latency counts from its
 * scheduled time, so a generator that falls behind shows as latency, never as a slower client.
 */
import http from 'node:http';
import type { RunClass } from '../../../events/schemas.js';
import { firstSends, type ScheduledSend } from './arrivals.js';
import { retryDelayMs, sendOutcome, wantsRetry, type SendOutcome } from './client-policy.js';
import type { Scenario } from './scenario.js';

export interface SendRecord {
  stream: number;
  tenant: string;
  workflow: string;
  class: RunClass;
  /** The logical request; its retries share it. */
  request: number;
  /** 1 for the first send of a request. */
  attempt: number;
  /** When the send was due, ms from the start. */
  dueMs: number;
  /** When the HTTP answer (or the transport error) came. */
  answeredMs?: number;
  outcome?: SendOutcome;
  /** The first status event of an accepted run. */
  firstEventMs?: number;
  terminalMs?: number;
  terminalStatus?: string;
  /** Set with the terminal status: a completed run whose result is marked degraded (a stand-in, not a real answer). */
  degraded?: boolean;
}

/** How a run ended, as the status topic told it: when (ms since the epoch), its status, and whether its result is marked degraded. */
export interface Terminal {
  atMs: number;
  status: string;
  degraded: boolean;
}

/** Where the harness learns what happened to an accepted run. */
export interface RunWatch {
  /** Calls `onEvent` for the run's first status event and `onTerminal` once it ends, also for events seen before the call. */
  follow(runId: string, onEvent: (atMs: number) => void, onTerminal: (terminal: Terminal) => void): void;
}

export interface TrafficOptions {
  apiUrl: string;
  /** API key per tenant. */
  keys: Record<string, string>;
  scenario: Scenario;
  timeScale: number;
  seed: number;
  /** Streams to leave out (a scenario without its noisy tenant). */
  skipStream?: (index: number) => boolean;
  /** `deadlineMs` each class's clients send (after it every accepted run has a terminal status); undefined: they send none. */
  deadlineMs: Record<RunClass, number> | undefined;
  /** A send without an answer after this long is a transport error. */
  requestTimeoutMs: number;
  /** Sends waiting for an HTTP answer at most; a send beyond it is not made and is counted. */
  maxOutstanding: number;
}

export interface TrafficResult {
  sends: SendRecord[];
  /** The first sends as scheduled, those dropped included: the arrivals. */
  schedule: ScheduledSend[];
  /** Sends not made because `maxOutstanding` were waiting: the client could not keep up. */
  dropped: number;
  /** When the last send was due, ms from the start. */
  lastDueMs: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export class ScenarioTraffic {
  private readonly sends: SendRecord[] = [];
  private readonly agent: http.Agent;
  private readonly target: URL;
  private readonly t0 = Date.now();
  private outstanding = 0;
  private dropped = 0;
  /** Requests not yet settled: waiting for an answer, a terminal status or a retry. */
  private unsettled = 0;
  private lastDueMs = 0;
  private settledAll: (() => void) | undefined;
  /** Set at the cutoff: a retry still waiting is not sent. */
  private stopped = false;

  constructor(
    private readonly opts: TrafficOptions,
    private readonly watch: RunWatch,
  ) {
    this.agent = new http.Agent({ keepAlive: true, maxSockets: opts.maxOutstanding });
    this.target = new URL('/v1/runs', opts.apiUrl);
  }

  nowMs(): number {
    return Date.now() - this.t0;
  }

  /**
   * Sends every stream's schedule, then waits until each request is settled or `cutoffMs` after
   * the last send passes (runs that never end are what the harness counts as lost).
   */
  async run(cutoffAfterLastSendMs: number): Promise<TrafficResult> {
    const { scenario, timeScale, seed } = this.opts;
    const schedule = firstSends(scenario, timeScale, seed, this.opts.skipStream);
    let request = 0;
    for (const { stream, dueMs } of schedule) {
      const waitMs = dueMs - this.nowMs();
      if (waitMs > 1) await sleep(waitMs);
      this.unsettled++;
      this.send(stream, request++, 1, dueMs);
    }
    const settled = new Promise<void>((resolve) => {
      this.settledAll = resolve;
      if (this.unsettled === 0) resolve();
    });
    // The cutoff moves with every retry sent, so a retry always has its full deadline.
    for (;;) {
      const leftMs = this.lastDueMs + cutoffAfterLastSendMs - this.nowMs();
      if (leftMs <= 0) break;
      if (await Promise.race([settled.then(() => true), sleep(Math.min(leftMs, 1_000)).then(() => false)])) break;
    }
    this.stopped = true;
    this.agent.destroy();
    return { sends: this.sends, schedule, dropped: this.dropped, lastDueMs: this.lastDueMs };
  }

  private send(stream: number, request: number, attempt: number, dueMs: number): void {
    const s = this.opts.scenario.arrivals[stream]!;
    const record: SendRecord = { stream, tenant: s.tenant, workflow: s.workflow, class: s.class, request, attempt, dueMs };
    this.lastDueMs = Math.max(this.lastDueMs, dueMs);
    if (this.outstanding >= this.opts.maxOutstanding) {
      this.dropped++;
      this.settle();
      return;
    }
    this.sends.push(record);
    this.outstanding++;
    const payload = JSON.stringify({
      workflow: s.workflow,
      class: s.class,
      deadlineMs: this.opts.deadlineMs?.[s.class],
      input: { message: 'Where is order 42?', orderId: String(request) },
    });
    const req = http.request(
      {
        host: this.target.hostname,
        port: this.target.port,
        path: this.target.pathname,
        method: 'POST',
        agent: this.agent,
        timeout: this.opts.requestTimeoutMs,
        headers: { authorization: `Bearer ${this.opts.keys[s.tenant]}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          let body: unknown;
          try {
            body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
          } catch {
            body = undefined;
          }
          this.answered(record, sendOutcome(res.statusCode ?? 0, body));
        });
        res.on('error', (err) => this.answered(record, { kind: 'transport', message: err.message }));
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer within ${this.opts.requestTimeoutMs} ms`)));
    req.on('error', (err) => this.answered(record, { kind: 'transport', message: err.message }));
    req.end(payload);
  }

  private answered(record: SendRecord, outcome: SendOutcome): void {
    if (record.outcome !== undefined) return;
    this.outstanding--;
    record.answeredMs = this.nowMs();
    record.outcome = outcome;
    if (outcome.kind !== 'accepted') {
      this.next(record);
      return;
    }
    this.watch.follow(
      outcome.runId,
      (atMs) => {
        record.firstEventMs ??= atMs - this.t0;
      },
      ({ atMs, status, degraded }) => {
        if (record.terminalStatus !== undefined) return;
        record.terminalMs = atMs - this.t0;
        record.terminalStatus = status;
        record.degraded = degraded;
        this.next(record);
      },
    );
  }

  /** Sends the request again if the client wants to and has a retry left; otherwise it is settled. */
  private next(record: SendRecord): void {
    const delayMs = wantsRetry({ outcome: record.outcome!, terminalStatus: record.terminalStatus })
      ? retryDelayMs(this.opts.scenario.clientRetry, record.attempt, this.opts.timeScale)
      : undefined;
    if (delayMs === undefined) {
      this.settle();
      return;
    }
    const endedMs = record.terminalMs ?? record.answeredMs!;
    const dueMs = endedMs + delayMs;
    this.lastDueMs = Math.max(this.lastDueMs, dueMs);
    setTimeout(() => this.stopped || this.send(record.stream, record.request, record.attempt + 1, dueMs), Math.max(0, dueMs - this.nowMs())).unref();
  }

  private settle(): void {
    if (--this.unsettled === 0) this.settledAll?.();
  }
}
