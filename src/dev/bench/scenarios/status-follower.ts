/**
 * Follows every run of a scenario on the status topic (one consumer, not one SSE stream per run,
 * so following thousands of runs costs the system under test nothing): the time each run's first
 * status event and its terminal status reached the harness.
 */
import type { Consumer, Kafka } from 'kafkajs';
import type { EventCodec } from '../../../events/codec.js';
import { SUBJECTS, type RunStatusChanged } from '../../../events/schemas.js';
import { topicNames } from '../../../kafka/topics.js';
import { isTerminal } from '../../../status/run-history.js';
import type { RunWatch } from './traffic.js';

interface Seen {
  firstAt?: number;
  terminal?: { at: number; status: string };
  onEvent?: (atMs: number) => void;
  onTerminal?: (atMs: number, status: string) => void;
}

export class StatusFollower implements RunWatch {
  private readonly runs = new Map<string, Seen>();

  private constructor(private readonly consumer: Consumer) {}

  static async start(kafka: Kafka, codec: EventCodec, namespace: string): Promise<StatusFollower> {
    const consumer = kafka.consumer({ groupId: `${namespace}scenario.status-follower`, maxWaitTimeInMs: 50, allowAutoTopicCreation: false });
    const follower = new StatusFollower(consumer);
    await consumer.connect();
    await consumer.subscribe({ topics: [topicNames(namespace).status], fromBeginning: true });
    await consumer.run({
      partitionsConsumedConcurrently: 6,
      eachBatch: async ({ batch }) => {
        const at = Date.now();
        for (const m of batch.messages) {
          const e = await codec.decode<RunStatusChanged>(m.value, SUBJECTS.runStatusChanged);
          follower.seen(e.runId, e.status, at);
        }
      },
    });
    return follower;
  }

  follow(runId: string, onEvent: (atMs: number) => void, onTerminal: (atMs: number, status: string) => void): void {
    const run = this.entry(runId);
    run.onEvent = onEvent;
    run.onTerminal = onTerminal;
    if (run.firstAt !== undefined) onEvent(run.firstAt);
    if (run.terminal !== undefined) onTerminal(run.terminal.at, run.terminal.status);
  }

  private seen(runId: string, status: RunStatusChanged['status'], at: number): void {
    const run = this.entry(runId);
    if (run.firstAt === undefined) {
      run.firstAt = at;
      run.onEvent?.(at);
    }
    if (run.terminal === undefined && isTerminal(status)) {
      run.terminal = { at, status };
      run.onTerminal?.(at, status);
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

  stop(): Promise<void> {
    return this.consumer.disconnect();
  }
}
