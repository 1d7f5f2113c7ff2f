/**
 * Follows every run of a scenario on the status topic (one consumer, not one SSE stream per run,
 * so following thousands of runs costs the system under test nothing): the time each run's first
 * status event and its terminal status reached the harness, and whether a completed run's result
 * is marked degraded (a stand-in, not a real answer).
 */
import type { Consumer, Kafka } from 'kafkajs';
import type { EventCodec } from '../../../events/codec.js';
import type { RunStatusChanged } from '../../../events/schemas.js';
import { isDegradedResult } from '../../../execution/fallback-policy.js';
import { isTerminal } from '../../../status/run-history.js';
import { consumeStatuses } from '../sluice-process.js';
import type { RunWatch, Terminal } from './traffic.js';

interface Seen {
  firstAt?: number;
  terminal?: Terminal;
  onEvent?: (atMs: number) => void;
  onTerminal?: (terminal: Terminal) => void;
}

export class StatusFollower implements RunWatch {
  private readonly runs = new Map<string, Seen>();

  private consumer: Consumer | undefined;

  static async start(kafka: Kafka, codec: EventCodec, namespace: string): Promise<StatusFollower> {
    const follower = new StatusFollower();
    follower.consumer = await consumeStatuses(kafka, codec, namespace, `${namespace}scenario.status-follower`, (e, at) => follower.seen(e, at));
    return follower;
  }

  follow(runId: string, onEvent: (atMs: number) => void, onTerminal: (terminal: Terminal) => void): void {
    const run = this.entry(runId);
    run.onEvent = onEvent;
    run.onTerminal = onTerminal;
    if (run.firstAt !== undefined) onEvent(run.firstAt);
    if (run.terminal !== undefined) onTerminal(run.terminal);
  }

  private seen(e: Pick<RunStatusChanged, 'runId' | 'status' | 'result'>, at: number): void {
    const run = this.entry(e.runId);
    if (run.firstAt === undefined) {
      run.firstAt = at;
      run.onEvent?.(at);
    }
    if (run.terminal === undefined && isTerminal(e.status)) {
      run.terminal = { atMs: at, status: e.status, degraded: e.status === 'completed' && isDegradedResult(e.result) };
      run.onTerminal?.(run.terminal);
    }
  }

  private entry(runId: string): Seen {
    let run = this.runs.get(runId);
    if (run === undefined) {
      run = {};
      this.runs.set(runId, run);
    }
    return run;
  }

  async stop(): Promise<void> {
    await this.consumer?.disconnect();
  }
}
