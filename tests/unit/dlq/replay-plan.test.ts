import { describe, expect, it } from 'vitest';
import { nextAttempt, planReplay, REPLAY_HEADER, ReplayRefusedError } from '../../../src/dlq/replay-plan.js';
import { topicNames } from '../../../src/kafka/topics.js';
import { deadRow, NOW, run } from './dead-letter-fixtures.js';

describe('replay construction', () => {
  const topics = topicNames('ns.');

  it('makes the next attempt: same run, attempt + 1, the same window from now, due at once', () => {
    expect(nextAttempt(run, NOW)).toEqual({ ...run, attempt: 3, admittedAt: NOW, deadline: NOW + 600_000, dueAt: null, tokenReservation: null, prepaidTurns: null });
  });

  it('sends a run to its class topic keyed by tenant, marked with the row it came from', () => {
    const plan = planReplay(deadRow(), run, topics, NOW);
    expect(REPLAY_HEADER).toBe('sluice-replay-of');
    expect(plan).toEqual({
      topic: 'ns.sluice.runs.batch',
      key: 'tenant-a',
      headers: { traceparent: run.traceparent, 'sluice-replay-of': '12' },
      body: { run: nextAttempt(run, NOW) },
    });
    expect(planReplay(deadRow(), { ...run, class: 'interactive' }, topics, NOW).topic).toBe('ns.sluice.runs.interactive');
  });

  it('sends poison back unchanged: original bytes, key and topic', () => {
    const row = deadRow({ payloadJson: null, originalTopic: 'ns.sluice.runs.interactive', originalKey: Buffer.from([0xff]) });
    const plan = planReplay(row, undefined, topics, NOW);
    expect(plan).toEqual({ topic: 'ns.sluice.runs.interactive', key: Buffer.from([0xff]), headers: { 'sluice-replay-of': '12' }, body: { raw: row.payload } });
  });

  it.each(['interactive', 'batch', 'retry', 'status', 'dlq'] as const)('sends poison back into this namespace’s %s topic', (kind) => {
    const row = deadRow({ payloadJson: null, originalTopic: topics[kind] });
    expect(planReplay(row, undefined, topics, NOW).topic).toBe(`ns.sluice.runs.${kind}`);
  });

  it.each([
    ['another namespace’s work topic', 'other.sluice.runs.interactive'],
    ['the same topic without the namespace', 'sluice.runs.interactive'],
    ['a topic outside Sluice', 'payments.ledger'],
    ['a name that only starts like ours', 'ns.sluice.runs.interactive.shadow'],
    ['an empty topic', ''],
  ])('refuses poison whose original topic is %s, naming it and the topics it may use', (_, originalTopic) => {
    const row = deadRow({ payloadJson: null, originalTopic });
    let caught: unknown;
    try {
      planReplay(row, undefined, topics, NOW);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(ReplayRefusedError);
    expect((caught as Error).name).toBe('ReplayRefusedError');
    expect((caught as Error).message).toBe(
      `its original topic ${JSON.stringify(originalTopic)} is not one of this namespace's topics (ns.sluice.runs.interactive, ns.sluice.runs.batch, ns.sluice.runs.retry, ns.sluice.runs.status, ns.sluice.runs.dlq, ns.sluice.runs.requests), the only ones a replay produces into`,
    );
  });

  it.each(['interactive', 'batch', 'retry'] as const)('takes a run read from this namespace’s %s topic for a run', (kind) => {
    const plan = planReplay(deadRow({ originalTopic: topics[kind] }), run, topics, NOW);
    expect(plan.body).toEqual({ run: nextAttempt(run, NOW) });
  });

  it('sends a record the ingress refused back to the ingress topic as its bytes, even when it decodes as a run', () => {
    const row = deadRow({ originalTopic: topics.requests, originalKey: Buffer.from('tenant-c') });
    expect(planReplay(row, { ...run, tenantId: 'tenant-b' }, topics, NOW)).toEqual({
      topic: 'ns.sluice.runs.requests',
      key: Buffer.from('tenant-c'),
      headers: { 'sluice-replay-of': '12' },
      body: { raw: row.payload },
    });
  });

  it('refuses a decodable run from a topic outside this namespace instead of making it a run', () => {
    expect(() => planReplay(deadRow({ originalTopic: 'payments.ledger' }), run, topics, NOW)).toThrow(ReplayRefusedError);
  });
});
