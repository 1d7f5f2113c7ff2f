import { describe, expect, it } from 'vitest';
import { emptyTally, replayResult, tallyOutcome } from '../../../src/dlq/replay-outcome.js';
import { planReplay, ReplayRefusedError } from '../../../src/dlq/replay-plan.js';
import { topicNames } from '../../../src/kafka/topics.js';
import { deadRow, NOW, run } from './dead-letter-fixtures.js';

describe('replay outcomes', () => {
  const plan = planReplay(deadRow({ originalTopic: 'sluice.runs.retry' }), run, topicNames(''), NOW);

  it('tells a refusal apart from a failure, and leaves other outcomes as they are', () => {
    const refusal = new ReplayRefusedError('its original topic "x" is not one of this namespace\'s topics');
    expect(replayResult({ id: '5', result: 'failed', error: refusal })).toEqual({ id: '5', result: 'refused', error: refusal });
    const boom = { id: '6', result: 'failed', error: new Error('Kafka: producing timed out') } as const;
    expect(replayResult(boom)).toBe(boom);
    const skipped = { id: '7', result: 'skipped', why: 'discarded' } as const;
    expect(replayResult(skipped)).toBe(skipped);
    const replayed = { id: '8', result: 'replayed', value: plan } as const;
    expect(replayResult(replayed)).toBe(replayed);
  });

  it('counts each outcome, skips by why', () => {
    const tally = emptyTally();
    tallyOutcome(tally, { id: '1', result: 'replayed', value: plan });
    tallyOutcome(tally, { id: '2', result: 'replayed', value: plan });
    tallyOutcome(tally, { id: '3', result: 'skipped', why: 'locked' });
    tallyOutcome(tally, { id: '4', result: 'skipped', why: 'not_found' });
    tallyOutcome(tally, { id: '5', result: 'skipped', why: 'locked' });
    tallyOutcome(tally, { id: '6', result: 'refused', error: new ReplayRefusedError('foreign') });
    tallyOutcome(tally, { id: '7', result: 'failed', error: new Error('x') });
    expect(tally).toEqual({ replayed: 2, refused: 1, failed: 1, skipped: { not_found: 1, replayed: 0, discarded: 0, locked: 2 } });
    expect(emptyTally()).toEqual({ replayed: 0, refused: 0, failed: 0, skipped: { not_found: 0, replayed: 0, discarded: 0, locked: 0 } });
  });
});
