import type { Pool } from 'pg';
import type { TokenUsage } from './run-usage.js';

/** One tenant's workflow over a window: its completed runs' LLM usage summed (`sluice usage`). */
export interface WorkflowUsage extends TokenUsage {
  tenantId: string;
  workflow: string;
  runs: number;
  llmCalls: number;
  /** Dollars of the runs whose cost is known; `unpricedRuns` more used a model without a price. */
  costUsd: number;
  unpricedRuns: number;
}

export interface UsageWindow {
  namespace: string;
  /** Runs that completed at or after this time. */
  since: Date;
  tenantId?: string;
}

interface UsageRow {
  tenant_id: string;
  workflow: string;
  runs: number;
  unpriced_runs: number;
  llm_calls: string;
  input_tokens: string;
  output_tokens: string;
  cache_creation_input_tokens: string;
  cache_read_input_tokens: string;
  cost_usd: string;
}

/** `run_usage` summed per tenant and workflow over the window, ordered by tenant then workflow. */
export async function usageByWorkflow(pool: Pool, window: UsageWindow): Promise<WorkflowUsage[]> {
  const { rows } = await pool.query<UsageRow>(
    `SELECT tenant_id, workflow,
            count(*)::int AS runs,
            count(*) FILTER (WHERE cost_usd IS NULL)::int AS unpriced_runs,
            sum(llm_calls)::text AS llm_calls,
            sum(input_tokens)::text AS input_tokens,
            sum(output_tokens)::text AS output_tokens,
            sum(cache_creation_input_tokens)::text AS cache_creation_input_tokens,
            sum(cache_read_input_tokens)::text AS cache_read_input_tokens,
            coalesce(sum(cost_usd), 0)::text AS cost_usd
       FROM run_usage
      WHERE namespace = $1 AND finished_at >= $2 AND ($3::text IS NULL OR tenant_id = $3)
      GROUP BY tenant_id, workflow
      ORDER BY tenant_id, workflow`,
    [window.namespace, window.since, window.tenantId ?? null],
  );
  return rows.map((r) => ({
    tenantId: r.tenant_id,
    workflow: r.workflow,
    runs: r.runs,
    llmCalls: Number(r.llm_calls),
    inputTokens: Number(r.input_tokens),
    outputTokens: Number(r.output_tokens),
    cacheCreationInputTokens: Number(r.cache_creation_input_tokens),
    cacheReadInputTokens: Number(r.cache_read_input_tokens),
    costUsd: Number(r.cost_usd),
    unpricedRuns: r.unpriced_runs,
  }));
}
