import type { RunStatus, RunStatusChanged } from '../events/schemas.js';

export const TERMINAL_STATUSES: ReadonlySet<RunStatus> = new Set(['completed', 'failed', 'expired', 'cancelled', 'dead_lettered', 'rejected']);

export function isTerminal(status: RunStatus): boolean {
  return TERMINAL_STATUSES.has(status);
}

/** What one batch of status events changes about a run's row; applied only if newer. */
export interface RunRowPatch {
  runId: string;
  tenantId: string;
  workflow: string;
  class: string;
  admittedAt: number;
  deadline: number;
  status: RunStatus;
  statusMessage: string;
  lastSequence: number;
  attempts: number;
  startedAt: number | null;
  finishedAt: number | null;
  result: string | null;
  error: RunStatusChanged['error'];
}

/**
 * Folds a batch of status events into one patch per run. Events may arrive duplicated (at-least-
 * once) and a batch may hold several transitions of one run: the highest sequence decides the
 * status, the first `running` gives startedAt, and a terminal event gives finishedAt.
 */
export function foldStatusEvents(events: readonly RunStatusChanged[]): RunRowPatch[] {
  const byRun = new Map<string, RunRowPatch>();
  const ordered = [...events].sort((a, b) => a.sequence - b.sequence);
  for (const e of ordered) {
    const prev = byRun.get(e.runId);
    const startedAt = prev?.startedAt ?? (e.status === 'running' ? e.occurredAt : null);
    byRun.set(e.runId, {
      runId: e.runId,
      tenantId: e.tenantId,
      workflow: e.workflow,
      class: e.class,
      admittedAt: e.admittedAt,
      deadline: e.deadline,
      status: e.status,
      statusMessage: e.message,
      lastSequence: e.sequence,
      attempts: Math.max(prev?.attempts ?? 0, e.attempt),
      startedAt,
      finishedAt: isTerminal(e.status) ? e.occurredAt : null,
      result: e.result ?? prev?.result ?? null,
      error: isTerminal(e.status) ? e.error : null,
    });
  }
  return [...byRun.values()];
}
