import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DeadLetterEnvelope, RunRequested, RunStatusChanged } from '../../../src/events/schemas.js';

export async function tempDir(): Promise<{ path: string; remove: () => Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), 'sluice-events-'));
  return { path, remove: () => rm(path, { recursive: true, force: true }) };
}

export { seededRandom } from '../../../src/util/seeded-random.js';

const base = {
  runId: '0b6f4c1e-8d5e-4a5b-9a57-3c1f2b9a7e10',
  tenantId: 'acme',
  workflow: 'support-triage',
  class: 'interactive',
  admittedAt: 1_767_225_600_000,
  deadline: 1_767_225_630_000,
  attempt: 1,
  traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
} as const;

export const runRequested: RunRequested = {
  ...base,
  input: JSON.stringify({ ticket: 'Order 123 never arrived', lang: 'en' }),
  idempotencyKey: 'req-42',
  dueAt: null,
  tokenReservation: null,
  prepaidTurns: null,
};

export const runStatusChanged: RunStatusChanged = {
  ...base,
  attempt: 2,
  sequence: 7,
  status: 'failed',
  occurredAt: 1_767_225_612_345,
  message: 'anthropic answered 529 overloaded twice; retry budget exhausted',
  step: 'classify',
  result: null,
  error: { code: 'dependency_overloaded', message: 'anthropic: 529 overloaded_error', retryable: true },
  attemptStartedAt: 1_767_225_611_000,
  requestId: null,
  retryAfterSec: null,
};

export const deadLetter: DeadLetterEnvelope = {
  runId: null,
  tenantId: null,
  workflow: null,
  originalTopic: 'sluice.runs.interactive',
  originalPartition: 3,
  originalOffset: '9007199254740993',
  originalKey: Buffer.from('acme'),
  payload: Buffer.from([0xff, 0x00, 0x01, 0x02]),
  errorClass: 'EventDecodeError:bad_magic',
  errorMessage: 'first byte is 255',
  errorStack: null,
  attempts: 1,
  firstFailureAt: 1_767_225_600_001,
  lastFailureAt: 1_767_225_600_002,
  consumerGroup: 'sluice-processor',
};
