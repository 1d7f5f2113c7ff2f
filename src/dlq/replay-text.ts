import type { DeadLetterRow, ReplaySkip } from './dead-letter-store.js';
import type { ReplayResult, ReplayTally } from './replay-outcome.js';
import type { ReplayPlan } from './replay-plan.js';

/** What a replay did or would do, in words: `sluice dlq replay` prints these, the console shows them. */

/** A row as JSON (`sluice dlq show --json`, the console): the byte fields in base64. */
export function rowJson(row: DeadLetterRow): Record<string, unknown> {
  return { ...row, originalKey: row.originalKey?.toString('base64') ?? null, payload: row.payload.toString('base64') };
}

/** A time as `sluice dlq` prints it: UTC to the second, '-' for none. */
export const when = (d: Date | null): string => (d === null ? '-' : d.toISOString().replace('T', ' ').replace(/\.\d{3}Z$/, 'Z'));

function describePlan(id: string, plan: ReplayPlan): string {
  if ('raw' in plan.body) return `#${id}: the original ${plan.body.raw.length} bytes -> ${plan.topic}, unchanged`;
  const { run } = plan.body;
  return `#${id}: run ${run.runId} (${run.tenantId}/${run.workflow}) -> ${plan.topic} as attempt ${run.attempt}, deadline ${when(new Date(run.deadline))}`;
}

const SKIP_TEXT: Record<ReplaySkip, string> = {
  not_found: 'not found',
  replayed: 'already replayed',
  discarded: 'discarded',
  locked: 'being replayed by someone else',
};

export function outcomeLine(o: ReplayResult, dryRun: boolean): string {
  switch (o.result) {
    case 'replayed':
      return `${dryRun ? 'would replay' : 'replayed'} ${describePlan(o.id, o.value)}`;
    case 'skipped':
      return `${dryRun ? 'would skip' : 'skipped'} #${o.id}: ${SKIP_TEXT[o.why]}`;
    case 'refused':
      return `${dryRun ? 'would refuse' : 'refused'} #${o.id}: ${o.error.message}`;
    case 'failed':
      return `failed #${o.id}: ${o.error.message}`;
  }
}

export function summaryLine(t: ReplayTally, dryRun: boolean): string {
  const whys = (Object.entries(t.skipped) as [ReplaySkip, number][]).filter(([, n]) => n > 0).map(([why, n]) => `${n} ${SKIP_TEXT[why]}`);
  const skipped = Object.values(t.skipped).reduce((a, b) => a + b, 0);
  const detail = whys.length > 0 ? ` (${whys.join(', ')})` : '';
  if (dryRun) return `dry run, nothing changed: would replay ${t.replayed}, skip ${skipped}${detail}${t.refused > 0 ? `, refuse ${t.refused}` : ''}`;
  return `replayed ${t.replayed}, skipped ${skipped}${detail}${t.refused > 0 ? `, refused ${t.refused}` : ''}, failed ${t.failed}`;
}
