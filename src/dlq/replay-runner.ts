import type { Producer } from 'kafkajs';
import { EventDecodeError, type EventCodec } from '../events/codec.js';
import { SUBJECTS, type RunRequested } from '../events/schemas.js';
import { carriesRuns, type TopicNames } from '../kafka/topics.js';
import { TimeoutError, withTimeout } from '../util/with-timeout.js';
import type { DeadLetterFilter, DeadLetterRow, DeadLetterStore } from './dead-letter-store.js';
import { emptyTally, replayResult, tallyOutcome, type ReplayResult, type ReplayTally } from './replay-outcome.js';
import { pacer } from './replay-pacer.js';
import { planReplay, type ReplayPlan } from './replay-plan.js';

/** The producer a replay sends with, and the topics that exist: a replay never creates topics. */
export interface ReplayKafka {
  producer: Pick<Producer, 'send'>;
  existingTopics: ReadonlySet<string>;
  produceTimeoutMs: number;
}

export interface ReplayRunOptions {
  /** Recorded as replayed_by. */
  by: string;
  ratePerSec: number;
  /** Called once a row is done with, in order. */
  onOutcome: (o: ReplayResult) => void;
}

/**
 * Replays archived dead letters of one namespace, one row at a time: decode, plan, and produce
 * while the store holds the row's lock, so the row is marked replayed only once its event is sent.
 */
export class DeadLetterReplayer {
  constructor(
    private readonly store: Pick<DeadLetterStore, 'list' | 'get' | 'replayOne'>,
    private readonly codec: Pick<EventCodec, 'decode' | 'encode'>,
    private readonly topics: TopicNames,
    private readonly now: () => number = Date.now,
  ) {}

  /** The ids of the pending rows the filter matches, oldest first, so records go back in the order they failed. */
  async pendingIds(filter: DeadLetterFilter): Promise<string[]> {
    return (await this.store.list({ ...filter, status: 'pending' })).map((r) => r.id).reverse();
  }

  /** What a replay of each row would do, without taking its lock or touching Kafka. */
  async preview(ids: readonly string[], onOutcome: (o: ReplayResult) => void): Promise<ReplayTally> {
    const tally = emptyTally();
    for (const id of ids) {
      const outcome = await this.previewOne(id);
      tallyOutcome(tally, outcome);
      onOutcome(outcome);
    }
    return tally;
  }

  /** Replays the rows one by one at the given rate; stops early only when Kafka stops answering, leaving the rest `untried`. */
  async replay(ids: readonly string[], kafka: ReplayKafka, o: ReplayRunOptions): Promise<{ tally: ReplayTally; untried: number }> {
    const tally = emptyTally();
    const pace = pacer(o.ratePerSec);
    for (const [i, id] of ids.entries()) {
      await pace();
      const outcome = replayResult(
        await this.store.replayOne(id, o.by, async (row) => {
          const plan = planReplay(row, await this.decodeRun(row), this.topics, this.now());
          if (!kafka.existingTopics.has(plan.topic)) throw new Error(`topic ${plan.topic} does not exist: is the namespace (SLUICE_NAMESPACE) right?`);
          await this.send(kafka, plan);
          return plan;
        }),
      );
      tallyOutcome(tally, outcome);
      o.onOutcome(outcome);
      // Otherwise every row after it would wait out a timeout of its own.
      if (outcome.result === 'failed' && outcome.error instanceof TimeoutError) return { tally, untried: ids.length - i - 1 };
    }
    return { tally, untried: 0 };
  }

  private async previewOne(id: string): Promise<ReplayResult> {
    const row = await this.store.get(id);
    if (!row) return { id, result: 'skipped', why: 'not_found' };
    if (row.status !== 'pending') return { id, result: 'skipped', why: row.status };
    try {
      return { id, result: 'replayed', value: planReplay(row, await this.decodeRun(row), this.topics, this.now()) };
    } catch (err) {
      return replayResult({ id, result: 'failed', error: err as Error });
    }
  }

  /**
   * The archived run, or undefined for poison and for what was not read from a topic that carries
   * runs (planReplay sends those back as bytes). A run the sink decoded when archiving it but that
   * does not decode now points at a different schema registry: replaying its bytes as poison would
   * be wrong, so that is an error.
   */
  private async decodeRun(row: DeadLetterRow): Promise<RunRequested | undefined> {
    if (!carriesRuns(row.originalTopic, this.topics)) return undefined;
    try {
      return await this.codec.decode<RunRequested>(row.payload, SUBJECTS.runRequested);
    } catch (err) {
      if (!(err instanceof EventDecodeError)) throw err;
      if (row.payloadJson !== null) throw new Error(`the run was decoded when archived but does not decode now (${err.message}): is this the schema registry the processors use?`, { cause: err });
      return undefined;
    }
  }

  private async send({ producer, produceTimeoutMs }: ReplayKafka, plan: ReplayPlan): Promise<void> {
    const value = 'raw' in plan.body ? plan.body.raw : await this.codec.encode(SUBJECTS.runRequested, plan.body.run);
    await withTimeout(
      producer.send({ topic: plan.topic, acks: -1, timeout: produceTimeoutMs, messages: [{ key: plan.key, value, headers: plan.headers }] }),
      produceTimeoutMs + 1_000,
      `Kafka: producing to ${plan.topic}`,
    );
  }
}
