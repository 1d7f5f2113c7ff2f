import type { RunStatusChanged } from '../../src/events/schemas.js';

/** A status event with plain defaults (tenant-a, a batch run of report-digest, attempt 1) and the given fields. */
export function statusEvent(fields: Pick<RunStatusChanged, 'runId' | 'sequence' | 'status'> & Partial<RunStatusChanged>): RunStatusChanged {
  return {
    tenantId: 'tenant-a',
    workflow: 'report-digest',
    class: 'batch',
    admittedAt: 0,
    deadline: 60_000,
    attempt: 1,
    traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    occurredAt: 0,
    message: fields.status,
    step: null,
    result: null,
    error: null,
    attemptStartedAt: null,
    ...fields,
  };
}
