import { describe, expect, it } from 'vitest';
import type { AdmissionStore } from '../../../src/admission/admission-store.js';
import { releaseFinishedRun } from '../../../src/admission/backlog-release.js';
import type { RunStatusChanged } from '../../../src/events/schemas.js';
import { createLogger } from '../../../src/obs/logger.js';

const STARTED = 1_767_225_600_000;

function finished(over: Partial<RunStatusChanged> = {}): RunStatusChanged {
  return {
    runId: 'run-1',
    tenantId: 'tenant-a',
    workflow: 'support-reply',
    class: 'interactive',
    admittedAt: STARTED - 500,
    deadline: STARTED + 60_000,
    attempt: 1,
    traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    sequence: 3,
    status: 'completed',
    occurredAt: STARTED + 1_250,
    message: 'completed',
    step: null,
    result: '{}',
    error: null,
    attemptStartedAt: STARTED,
    ...over,
  };
}

function fakeBacklog(fail = false) {
  const released: { entry: Parameters<AdmissionStore['release']>[0]; executionMs: number | undefined }[] = [];
  const backlog: Pick<AdmissionStore, 'release'> = {
    release: async (entry, executionMs) => {
      if (fail) throw new Error('Connection is closed.');
      released.push({ entry, executionMs });
      return true;
    },
  };
  return { backlog, released };
}

function logged() {
  const lines: Record<string, unknown>[] = [];
  return { log: createLogger('info', 'test', { write: (line: string) => void lines.push(JSON.parse(line)) }), lines };
}

describe('releaseFinishedRun', () => {
  it('frees the place of a stored completed run and measures its attempt', async () => {
    const b = fakeBacklog();
    await releaseFinishedRun(b.backlog, finished(), true, logged().log);
    expect(b.released).toEqual([{ entry: { runId: 'run-1', tenantId: 'tenant-a', runClass: 'interactive' }, executionMs: 1_250 }]);
  });

  it('frees without measuring a run that did not complete, one whose attempt start is unknown, and one Postgres refused', async () => {
    const b = fakeBacklog();
    await releaseFinishedRun(b.backlog, finished({ status: 'failed', class: 'batch' }), true, logged().log);
    await releaseFinishedRun(b.backlog, finished({ attemptStartedAt: null }), true, logged().log);
    await releaseFinishedRun(b.backlog, finished(), false, logged().log);
    expect(b.released.map((r) => [r.entry.runClass, r.executionMs])).toEqual([
      ['batch', undefined],
      ['interactive', undefined],
      ['interactive', undefined],
    ]);
  });

  it('logs and resolves when Redis is down: the lease frees the place later', async () => {
    const { log, lines } = logged();
    await expect(releaseFinishedRun(fakeBacklog(true).backlog, finished(), true, log)).resolves.toBeUndefined();
    expect(lines.map((l) => [l.level, l.msg, l.runId])).toEqual([[40, 'could not release a finished run from the backlog; its lease will expire', 'run-1']]);
  });
});
