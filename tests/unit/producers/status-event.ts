import type { RunStatusChanged } from '../../../src/events/schemas.js';

/** A `queued` status of run-1 for tenant-a, with `over` laid on it. */
export const statusEvent = (over: Partial<RunStatusChanged>): RunStatusChanged => ({
  runId: 'run-1',
  tenantId: 'tenant-a',
  workflow: 'support-reply',
  class: 'interactive',
  admittedAt: 1,
  deadline: 2,
  attempt: 0,
  traceparent: 't',
  sequence: 0,
  status: 'queued',
  occurredAt: 1,
  message: 'm',
  step: null,
  result: null,
  error: null,
  attemptStartedAt: null,
  requestId: null,
  retryAfterSec: null,
  ...over,
});
