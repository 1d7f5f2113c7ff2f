import { describe, expect, it } from 'vitest';
import { totalUsage, usageJson, usageTable } from '../../../src/cli/usage-output.js';
import type { WorkflowUsage } from '../../../src/status/usage-report.js';

const row = (tenantId: string, workflow: string, over: Partial<WorkflowUsage> = {}): WorkflowUsage => ({
  tenantId,
  workflow,
  runs: 2,
  llmCalls: 4,
  inputTokens: 1_200,
  outputTokens: 300,
  cacheCreationInputTokens: 0,
  cacheReadInputTokens: 20_000,
  costUsd: 0.0141,
  unpricedRuns: 0,
  ...over,
});
const since = new Date('2026-12-01T00:00:00Z');

describe('totalUsage', () => {
  it('adds every count and the known cost', () => {
    expect(totalUsage([row('a', 'x'), row('b', 'y', { runs: 1, costUsd: 1, unpricedRuns: 1 })])).toEqual({
      runs: 3,
      llmCalls: 8,
      inputTokens: 2_400,
      outputTokens: 600,
      cacheCreationInputTokens: 0,
      cacheReadInputTokens: 40_000,
      costUsd: 1.0141,
      unpricedRuns: 1,
    });
  });

  it('is all zeros for no rows', () => {
    expect(totalUsage([])).toMatchObject({ runs: 0, costUsd: 0 });
  });
});

describe('usageTable', () => {
  it('a row per tenant and workflow, numbers right-aligned and grouped, then the total', () => {
    const table = usageTable([row('tenant-a', 'support-reply'), row('tenant-b', 'report-digest', { inputTokens: 1_234_567, costUsd: 3.70373 })], { since });
    expect(table).toBe(
      [
        'LLM usage of runs completed since 2026-12-01T00:00:00.000Z, every tenant',
        '',
        'TENANT    WORKFLOW       RUNS  LLM CALLS      INPUT  OUTPUT  CACHE WRITE  CACHE READ  COST USD  UNPRICED RUNS',
        'tenant-a  support-reply     2          4      1,200     300            0      20,000    0.0141              0',
        'tenant-b  report-digest     2          4  1,234,567     300            0      20,000    3.7037              0',
        'total                       4          8  1,235,767     600            0      40,000    3.7178              0',
        '',
        'INPUT excludes the cached tokens (CACHE WRITE, CACHE READ), as the Messages API counts them',
        '',
      ].join('\n'),
    );
  });

  it('says what UNPRICED RUNS means when there are some, and names the tenant filter', () => {
    const table = usageTable([row('tenant-a', 'support-reply', { unpricedRuns: 1 })], { since, tenantId: 'tenant-a' });
    expect(table.split('\n')[0]).toBe('LLM usage of runs completed since 2026-12-01T00:00:00.000Z, tenant tenant-a');
    expect(table).toContain('UNPRICED RUNS used a model no pricing entry matches: their cost is not in COST USD');
  });

  it('says none for an empty window', () => {
    expect(usageTable([], { since })).toBe('LLM usage of runs completed since 2026-12-01T00:00:00.000Z, every tenant: none\n');
  });
});

describe('usageJson', () => {
  it('the window, the rows and the total', () => {
    const rows = [row('tenant-a', 'support-reply')];
    expect(JSON.parse(usageJson(rows, { since }))).toEqual({ since: '2026-12-01T00:00:00.000Z', tenantId: null, workflows: rows, total: totalUsage(rows) });
  });
});
