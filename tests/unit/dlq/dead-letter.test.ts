import { describe, expect, it, vi } from 'vitest';
import { DEAD_LETTER_REASONS, DLQ_HEADER, buildDeadLetter, deadLetterPoison, reasonLabel, routePoison, type DeadLetterInput, type DeadLetterSink } from '../../../src/dlq/dead-letter.js';
import { EventDecodeError } from '../../../src/events/codec.js';
import type { DeadLetterEnvelope } from '../../../src/events/schemas.js';
import { createLogger } from '../../../src/obs/logger.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { metricValue } from '../../support/metric-value.js';

const FIRST = Date.UTC(2026, 0, 1, 0, 0, 0, 0);
const LAST = FIRST + 61_500;
/** Not valid UTF-8, not valid Avro: must survive byte for byte. */
const RAW = Buffer.from([0x00, 0xff, 0xfe, 0x00, 0x00, 0x00, 0x2a, 0xc3, 0x28, 0x80]);
const KEY = Buffer.from('tenant-a');

class ToolHttpError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ToolHttpError';
  }
}

function input(over: Partial<DeadLetterInput> = {}): DeadLetterInput {
  return {
    topic: 'sluice.runs.interactive',
    partition: 4,
    message: { offset: '9007199254740993', key: KEY, value: RAW },
    consumerGroup: 'sluice-processor',
    reason: 'dependency_unavailable',
    error: new ToolHttpError('order-lookup answered 503'),
    attempts: 5,
    firstFailureAt: FIRST,
    lastFailureAt: LAST,
    run: { runId: '019b7a00-0000-7000-8000-000000000001', tenantId: 'tenant-a', workflow: 'support-reply' },
    ...over,
  };
}

describe('buildDeadLetter', () => {
  it('keeps the original payload and key bytes untouched', () => {
    const rawCopy = Buffer.from(RAW);
    const { envelope } = buildDeadLetter(input());
    expect(Buffer.compare(envelope.payload, rawCopy)).toBe(0);
    expect(envelope.payload.length).toBe(10);
    expect(Buffer.compare(envelope.originalKey!, Buffer.from('tenant-a'))).toBe(0);
    expect(Buffer.compare(RAW, rawCopy)).toBe(0);
  });

  it('uses an empty payload for a tombstone and null for a missing key', () => {
    const { envelope } = buildDeadLetter(input({ message: { offset: '7', key: null, value: null } }));
    expect(envelope.payload).toBeInstanceOf(Buffer);
    expect(envelope.payload.length).toBe(0);
    expect(envelope.originalKey).toBeNull();
  });

  it('fills the envelope with the failure context', () => {
    const err = new ToolHttpError('order-lookup answered 503');
    const { envelope } = buildDeadLetter(input({ error: err }));
    expect(envelope).toEqual<DeadLetterEnvelope>({
      runId: '019b7a00-0000-7000-8000-000000000001',
      tenantId: 'tenant-a',
      workflow: 'support-reply',
      originalTopic: 'sluice.runs.interactive',
      originalPartition: 4,
      originalOffset: '9007199254740993',
      originalKey: KEY,
      payload: RAW,
      errorClass: 'ToolHttpError',
      errorMessage: 'order-lookup answered 503',
      errorStack: err.stack!,
      attempts: 5,
      firstFailureAt: FIRST,
      lastFailureAt: LAST,
      consumerGroup: 'sluice-processor',
    });
  });

  it('carries topic, partition, offset, group, reason, error, attempts and ISO times as headers', () => {
    const { headers } = buildDeadLetter(input());
    expect(headers).toEqual({
      'sluice-dlt-original-topic': 'sluice.runs.interactive',
      'sluice-dlt-original-partition': '4',
      'sluice-dlt-original-offset': '9007199254740993',
      'sluice-dlt-original-consumer-group': 'sluice-processor',
      'sluice-dlt-reason': 'dependency_unavailable',
      'sluice-dlt-exception-fqcn': 'ToolHttpError',
      'sluice-dlt-exception-message': 'order-lookup answered 503',
      'sluice-dlt-attempts': '5',
      'sluice-dlt-first-failure-at': '2026-01-01T00:00:00.000Z',
      'sluice-dlt-last-failure-at': '2026-01-01T00:01:01.500Z',
      'sluice-dlt-tenant': 'tenant-a',
      'sluice-dlt-run-id': '019b7a00-0000-7000-8000-000000000001',
    });
    for (const v of Object.values(headers)) expect(typeof v).toBe('string');
  });

  it('names every header from DLQ_HEADER', () => {
    const { headers } = buildDeadLetter(input());
    expect(Object.keys(headers).sort()).toEqual(Object.values(DLQ_HEADER).sort());
  });

  it('has no run headers and null run fields when the run is unknown', () => {
    const { envelope, headers } = buildDeadLetter(input({ run: undefined }));
    expect(envelope.runId).toBeNull();
    expect(envelope.tenantId).toBeNull();
    expect(envelope.workflow).toBeNull();
    expect(headers).not.toHaveProperty(DLQ_HEADER.tenant);
    expect(headers).not.toHaveProperty(DLQ_HEADER.runId);
    expect(Object.keys(headers)).toHaveLength(10);
  });

  it('trims a long error message to 1000 characters in the envelope and the header', () => {
    const long = 'x'.repeat(1_500);
    const { envelope, headers } = buildDeadLetter(input({ error: new Error(long) }));
    expect(envelope.errorMessage).toBe('x'.repeat(1_000));
    expect(headers[DLQ_HEADER.errorMessage]).toBe('x'.repeat(1_000));
    const exact = buildDeadLetter(input({ error: new Error('y'.repeat(1_000)) }));
    expect(exact.envelope.errorMessage).toHaveLength(1_000);
  });

  it('trims a long stack to 4000 characters and keeps a short one whole', () => {
    const err = new Error('boom');
    err.stack = `Error: boom\n${'    at somewhere (file.ts:1:1)\n'.repeat(300)}`;
    expect(err.stack.length).toBeGreaterThan(4_000);
    const { envelope } = buildDeadLetter(input({ error: err }));
    expect(envelope.errorStack).toHaveLength(4_000);
    expect(envelope.errorStack).toBe(err.stack.slice(0, 4_000));

    const short = new Error('short');
    short.stack = 'Error: short';
    expect(buildDeadLetter(input({ error: short })).envelope.errorStack).toBe('Error: short');
  });

  it('has a null stack when the error has none', () => {
    const err = new Error('no stack');
    err.stack = undefined;
    expect(buildDeadLetter(input({ error: err })).envelope.errorStack).toBeNull();
  });
});

describe('deadLetterPoison', () => {
  function recordingSink() {
    const calls: Array<{ envelope: DeadLetterEnvelope; headers: Record<string, string>; timeoutMs: number }> = [];
    const sink: DeadLetterSink = {
      publishDeadLetter: vi.fn(async (envelope, headers, timeoutMs) => {
        calls.push({ envelope, headers, timeoutMs });
      }),
    };
    return { sink, calls };
  }

  const record = { topic: 'sluice.runs.batch', partition: 2, message: { offset: '41', key: KEY, value: RAW } };

  it('publishes once with reason decode_error, one attempt and the given time', async () => {
    const { sink, calls } = recordingSink();
    const err = new Error('unknown magic byte 0xff');
    err.name = 'EventDecodeError';
    await deadLetterPoison(sink, record, 'sluice-processor', err, 2_500, FIRST);
    expect(sink.publishDeadLetter).toHaveBeenCalledTimes(1);
    const { envelope, headers, timeoutMs } = calls[0]!;
    expect(timeoutMs).toBe(2_500);
    expect(headers[DLQ_HEADER.reason]).toBe('decode_error');
    expect(headers[DLQ_HEADER.attempts]).toBe('1');
    expect(headers[DLQ_HEADER.firstFailureAt]).toBe('2026-01-01T00:00:00.000Z');
    expect(headers[DLQ_HEADER.lastFailureAt]).toBe('2026-01-01T00:00:00.000Z');
    expect(headers[DLQ_HEADER.originalTopic]).toBe('sluice.runs.batch');
    expect(headers[DLQ_HEADER.originalPartition]).toBe('2');
    expect(headers[DLQ_HEADER.originalOffset]).toBe('41');
    expect(headers[DLQ_HEADER.consumerGroup]).toBe('sluice-processor');
    expect(headers).not.toHaveProperty(DLQ_HEADER.runId);
    expect(envelope).toMatchObject({ runId: null, tenantId: null, workflow: null, errorClass: 'EventDecodeError', attempts: 1, firstFailureAt: FIRST, lastFailureAt: FIRST });
    expect(Buffer.compare(envelope.payload, RAW)).toBe(0);
  });

  it('defaults the failure time to now', async () => {
    const { sink, calls } = recordingSink();
    const before = Date.now();
    await deadLetterPoison(sink, record, 'g', new Error('bad'), 1_000);
    const after = Date.now();
    expect(calls[0]!.envelope.firstFailureAt).toBeGreaterThanOrEqual(before);
    expect(calls[0]!.envelope.firstFailureAt).toBeLessThanOrEqual(after);
    expect(calls[0]!.envelope.lastFailureAt).toBe(calls[0]!.envelope.firstFailureAt);
  });

  it('resolves only once the sink has acknowledged', async () => {
    let ack: () => void = () => {};
    const sink: DeadLetterSink = { publishDeadLetter: () => new Promise<void>((r) => (ack = r)) };
    let done = false;
    const p = deadLetterPoison(sink, record, 'g', new Error('bad'), 1_000, FIRST).then(() => {
      done = true;
    });
    await new Promise((r) => setImmediate(r));
    expect(done).toBe(false);
    ack();
    await p;
    expect(done).toBe(true);
  });

  it('rejects when the sink fails, so the offset is not passed', async () => {
    const sink: DeadLetterSink = { publishDeadLetter: vi.fn(async () => Promise.reject(new Error('dlq produce timed out'))) };
    await expect(deadLetterPoison(sink, record, 'g', new Error('bad'), 1_000, FIRST)).rejects.toThrow('dlq produce timed out');
    expect(sink.publishDeadLetter).toHaveBeenCalledTimes(1);
  });
});

describe('reasonLabel', () => {
  it('keeps every reason Sluice writes and folds anything else into "other"', () => {
    for (const reason of DEAD_LETTER_REASONS) expect(reasonLabel(reason)).toBe(reason);
    expect(reasonLabel('made-up-by-whoever-produced-this')).toBe('other');
    expect(reasonLabel('')).toBe('other');
    expect(reasonLabel('constructor')).toBe('other');
  });
});

describe('routePoison', () => {
  const record = { topic: 'sluice.runs.status', partition: 1, message: { offset: '7', key: KEY, value: RAW } };

  function route(publish: DeadLetterSink['publishDeadLetter']) {
    const lines: Record<string, unknown>[] = [];
    const metrics = createMetrics();
    const log = createLogger('info', 'test', { write: (line: string) => void lines.push(JSON.parse(line)) });
    const published: Record<string, string>[] = [];
    const deadLetters: DeadLetterSink = {
      publishDeadLetter: async (envelope, headers, timeoutMs) => {
        await publish(envelope, headers, timeoutMs);
        published.push(headers);
      },
    };
    return { route: { deadLetters, consumerGroup: 'sluice.status-sink', timeoutMs: 2_000, metrics, log, logMessage: 'undecodable status event sent to the DLQ' }, lines, metrics, published };
  }

  it('logs the record and why, dead-letters it with its group and counts it once acknowledged', async () => {
    const r = route(async () => undefined);
    await routePoison(r.route, record, new EventDecodeError('bad_magic', 'not a schema-registry frame'));
    expect(r.lines.map((l) => [l.msg, l.topic, l.partition, l.offset, l.reason])).toEqual([['undecodable status event sent to the DLQ', 'sluice.runs.status', 1, '7', 'bad_magic']]);
    expect(r.published.map((h) => [h[DLQ_HEADER.reason], h[DLQ_HEADER.consumerGroup], h[DLQ_HEADER.originalOffset]])).toEqual([['decode_error', 'sluice.status-sink', '7']]);
    expect(await metricValue(r.metrics.deadLettered, { topic: 'sluice.runs.status', reason: 'decode_error' })).toBe(1);
  });

  it('counts nothing and rejects when the DLQ does not acknowledge', async () => {
    const r = route(async () => Promise.reject(new Error('dlq produce timed out')));
    await expect(routePoison(r.route, record, new EventDecodeError('bad_avro', 'truncated'))).rejects.toThrow('dlq produce timed out');
    expect(await metricValue(r.metrics.deadLettered, { topic: 'sluice.runs.status', reason: 'decode_error' })).toBe(0);
  });
});
