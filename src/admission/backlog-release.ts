import type { RunStatusChanged } from '../events/schemas.js';
import type { Logger } from '../obs/logger.js';
import type { AdmissionStore } from './admission-store.js';

/**
 * A run's terminal status frees its place in the admission backlog and feeds the measured
 * service rate. Best effort, so it never rejects: if Redis is down the entry's lease (deadline +
 * grace) frees it. A status that was not stored (Postgres refused it for good) still ends its run
 * and frees the place, but its times are suspect (a timestamp out of range is one reason to be
 * refused), so it is not measured.
 */
export async function releaseFinishedRun(backlog: Pick<AdmissionStore, 'release'>, event: RunStatusChanged, stored: boolean, log: Logger): Promise<void> {
  const executionMs = stored && event.status === 'completed' && event.attemptStartedAt !== null ? event.occurredAt - event.attemptStartedAt : undefined;
  try {
    await backlog.release({ runId: event.runId, tenantId: event.tenantId, runClass: event.class }, executionMs);
  } catch (err) {
    log.warn({ err, runId: event.runId }, 'could not release a finished run from the backlog; its lease will expire');
  }
}
