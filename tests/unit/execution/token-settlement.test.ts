import { describe, expect, it } from 'vitest';
import { RESERVATION_MARKER_GRACE_MS, type TokenBudget, type TokenChange } from '../../../src/admission/token-budget.js';
import { loadConfig } from '../../../src/config/load.js';
import type { SluiceConfig, TenantConfig } from '../../../src/config/schema.js';
import { callSettlement, endSettlement, TokenSettlement } from '../../../src/execution/token-settlement.js';
import { createLogger } from '../../../src/obs/logger.js';
import { RUN } from './fixtures.js';

describe('settlement amounts', () => {
  it('the first call gives the reservation back and charges what it used; later calls charge what they used', () => {
    const first = callSettlement({ reservation: 1_000, settled: false, used: 0 }, 300);
    expect(first).toEqual({ change: { charge: 300, giveBack: 1_000 }, next: { reservation: 1_000, settled: true, used: 300 } });
    const second = callSettlement(first.next, 900);
    expect(second).toEqual({ change: { charge: 900, giveBack: 0 }, next: { reservation: 1_000, settled: true, used: 1_200 } });
  });

  it('without a reservation (no budget at admission, a retry) every call is charged in full', () => {
    expect(callSettlement({ reservation: 0, settled: false, used: 0 }, 40).change).toEqual({ charge: 40, giveBack: 0 });
  });

  it('an attempt ending unsettled gives its reservation back; a settled one gives nothing', () => {
    expect(endSettlement({ reservation: 800, settled: false, used: 0 })).toEqual({ charge: 0, giveBack: 800 });
    expect(endSettlement({ reservation: 800, settled: true, used: 10 })).toEqual({ charge: 0, giveBack: 0 });
  });
});

describe('TokenSettlement', () => {
  const budget: TokenBudget = { tokensPerMinute: 600, burstTokens: 1_000 };
  const base = loadConfig({ env: {} });
  const withBudget = (): SluiceConfig => {
    const a = base.tenants['tenant-a']!;
    const tenant: TenantConfig = { ...a, admission: { ...a.admission, tokenBudget: budget } };
    return { ...base, tenants: { ...base.tenants, 'tenant-a': tenant } };
  };

  function settlement(config: SluiceConfig, failing = false) {
    const settled: Array<[string, number, number]> = [];
    const folded: Array<[string, number]> = [];
    const store = {
      settle: async (tenant: string, _b: TokenBudget, run: { runId: string; until: number }, change: TokenChange) => {
        if (failing) throw new Error('Command timed out');
        expect(run).toEqual({ runId: RUN.runId, until: RUN.deadline + RESERVATION_MARKER_GRACE_MS });
        settled.push([tenant, change.giveBack, change.charge]);
        return { tokensLeft: 0, gaveBack: change.giveBack > 0 };
      },
      fold: async (workflow: string, tokens: number) => {
        if (failing) throw new Error('Command timed out');
        folded.push([workflow, tokens]);
        return { perRun: tokens, samples: 1 };
      },
    };
    return { s: new TokenSettlement(config, store, createLogger('silent')), settled, folded };
  }

  const reserved = { ...RUN, tenantId: 'tenant-a', tokenReservation: 1_000 };

  it('settles each call, and folds a completed attempt’s total into its workflow’s estimate', async () => {
    const { s, settled, folded } = settlement(withBudget());
    await s.charge(reserved, 300);
    await s.charge(reserved, 250);
    await s.endAttempt(reserved, 'completed');
    expect(settled).toEqual([['tenant-a', 1_000, 300], ['tenant-a', 0, 250]]);
    expect(folded).toEqual([[RUN.workflow, 550]]);
  });

  it('an attempt that ends before any LLM call gives the reservation back and folds nothing', async () => {
    const { s, settled, folded } = settlement(withBudget());
    await s.endAttempt(reserved, 'retried');
    expect(settled).toEqual([['tenant-a', 1_000, 0]]);
    expect(folded).toEqual([]);
  });

  it('a failed attempt is settled but not folded: only completed runs measure a workflow', async () => {
    const { s, settled, folded } = settlement(withBudget());
    await s.charge(reserved, 100);
    await s.endAttempt(reserved, 'failed');
    expect(settled).toEqual([['tenant-a', 1_000, 100]]);
    expect(folded).toEqual([]);
  });

  it('attempts are kept apart: a retry carries no reservation and is charged in full', async () => {
    const { s, settled } = settlement(withBudget());
    await s.charge(reserved, 100);
    await s.charge({ ...reserved, attempt: 2, tokenReservation: null }, 40);
    expect(settled).toEqual([['tenant-a', 1_000, 100], ['tenant-a', 0, 40]]);
  });

  it('a tenant without a budget is not settled, but its completed runs still measure the workflow', async () => {
    const { s, settled, folded } = settlement(withBudget());
    const other = { ...RUN, tenantId: 'tenant-b', tokenReservation: null };
    await s.charge(other, 120);
    await s.endAttempt(other, 'completed');
    expect(settled).toEqual([]);
    expect(folded).toEqual([[RUN.workflow, 120]]);
  });

  it('with no budget configured anywhere, nothing reaches Redis', async () => {
    const { s, settled, folded } = settlement(base);
    await s.charge(reserved, 100);
    await s.endAttempt(reserved, 'completed');
    expect([settled, folded]).toEqual([[], []]);
  });

  it('Redis failing is logged, never thrown', async () => {
    const { s } = settlement(withBudget(), true);
    await expect(s.charge(reserved, 100)).resolves.toBeUndefined();
    await expect(s.endAttempt(reserved, 'completed')).resolves.toBeUndefined();
  });
});
