import type { RunRequested } from '../events/schemas.js';
import { carriesRuns, type TopicNames } from '../kafka/topics.js';
import type { DeadLetterRow } from './dead-letter-store.js';

/** Marks the event produced by a replay with the archive row it came from. */
export const REPLAY_HEADER = 'sluice-replay-of';

/** Where a replayed row goes and what it carries. */
export interface ReplayPlan {
  topic: string;
  key: string | Buffer | null;
  headers: Record<string, string>;
  /** A decodable run's next attempt (encoded when sent), or the untouched bytes of poison. */
  body: { run: RunRequested } | { raw: Buffer };
}

/**
 * The run's next attempt. Its old deadline has passed while it sat in the archive, so it gets a
 * window as long as the one it was admitted with, starting now, and may start at once.
 */
export function nextAttempt(run: RunRequested, now: number): RunRequested {
  return { ...run, attempt: run.attempt + 1, admittedAt: now, deadline: now + (run.deadline - run.admittedAt), dueAt: null, tokenReservation: null, prepaidTurns: null };
}

/** A row that must not be replayed as it is: it stays pending, for `discard` or another namespace's replay. */
export class ReplayRefusedError extends Error {
  override readonly name = 'ReplayRefusedError';
}

/**
 * A run goes to its class's work topic as its next attempt; anything else goes back as it came, but
 * only into this namespace's topics: its original topic is whatever the dead letter's headers said,
 * and anyone who can write to the DLQ topic can say anything there. A payload counts as a run only
 * when it was read from a topic that carries runs Sluice wrote (`carriesRuns`): a record the ingress
 * refused goes back to the ingress topic as its bytes, where its signature is checked again, even
 * when it decodes as a run naming some tenant.
 */
export function planReplay(row: Pick<DeadLetterRow, 'id' | 'originalTopic' | 'originalKey' | 'payload'>, run: RunRequested | undefined, topics: TopicNames, now: number): ReplayPlan {
  if (!run || !carriesRuns(row.originalTopic, topics)) {
    const own = Object.values(topics);
    if (!own.includes(row.originalTopic)) {
      throw new ReplayRefusedError(`its original topic ${JSON.stringify(row.originalTopic)} is not one of this namespace's topics (${own.join(', ')}), the only ones a replay produces into`);
    }
    return { topic: row.originalTopic, key: row.originalKey, headers: { [REPLAY_HEADER]: row.id }, body: { raw: row.payload } };
  }
  const next = nextAttempt(run, now);
  return { topic: topics[next.class], key: next.tenantId, headers: { traceparent: next.traceparent, [REPLAY_HEADER]: row.id }, body: { run: next } };
}
