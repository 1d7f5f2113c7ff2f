import { roundUsd } from '../status/run-usage.js';
import type { WorkflowUsage } from '../status/usage-report.js';
import { formatTable } from './dlq-output.js';

/** What `sluice usage` prints: a row per tenant and workflow, and the total. */

export type UsageTotal = Omit<WorkflowUsage, 'tenantId' | 'workflow'>;

export function totalUsage(rows: readonly WorkflowUsage[]): UsageTotal {
  const total: UsageTotal = { runs: 0, llmCalls: 0, inputTokens: 0, outputTokens: 0, cacheCreationInputTokens: 0, cacheReadInputTokens: 0, costUsd: 0, unpricedRuns: 0 };
  for (const r of rows) {
    for (const key of Object.keys(total) as (keyof UsageTotal)[]) total[key] += r[key];
  }
  return { ...total, costUsd: roundUsd(total.costUsd) };
}

const COLUMNS = ['TENANT', 'WORKFLOW', 'RUNS', 'LLM CALLS', 'INPUT', 'OUTPUT', 'CACHE WRITE', 'CACHE READ', 'COST USD', 'UNPRICED RUNS'];
const NUMBERS = new Set(COLUMNS.map((_, i) => i).slice(2));

const count = (n: number) => n.toLocaleString('en-US');

function cells(tenant: string, workflow: string, u: UsageTotal): string[] {
  return [tenant, workflow, count(u.runs), count(u.llmCalls), count(u.inputTokens), count(u.outputTokens), count(u.cacheCreationInputTokens), count(u.cacheReadInputTokens), u.costUsd.toFixed(4), count(u.unpricedRuns)];
}

export interface UsageQuery {
  since: Date;
  tenantId?: string;
}

/** The table with a heading naming the window, the total as its last row, and what UNPRICED means when it is not 0. */
export function usageTable(rows: readonly WorkflowUsage[], query: UsageQuery): string {
  const scope = query.tenantId === undefined ? 'every tenant' : `tenant ${query.tenantId}`;
  const heading = `LLM usage of runs completed since ${query.since.toISOString()}, ${scope}`;
  if (rows.length === 0) return `${heading}: none\n`;
  const total = totalUsage(rows);
  const table = formatTable(COLUMNS, [...rows.map((r) => cells(r.tenantId, r.workflow, r)), cells('total', '', total)], NUMBERS);
  const notes = ['INPUT excludes the cached tokens (CACHE WRITE, CACHE READ), as the Messages API counts them'];
  if (total.unpricedRuns > 0) notes.push('UNPRICED RUNS used a model no pricing entry matches: their cost is not in COST USD');
  return `${heading}\n\n${table}\n${notes.join('\n')}\n`;
}

export function usageJson(rows: readonly WorkflowUsage[], query: UsageQuery): string {
  return JSON.stringify({ since: query.since.toISOString(), tenantId: query.tenantId ?? null, workflows: rows, total: totalUsage(rows) });
}
