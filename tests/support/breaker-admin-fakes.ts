import type { AdminBreakersRouteDeps } from '../../src/api/routes/admin-breakers.js';
import type { DependencyReport } from '../../src/api/console/dependencies.js';
import type { BreakerForce, ForceMode } from '../../src/breakers/breaker-gate.js';

/**
 * The admin breakers' store and reports in memory: forces are kept per dependency (no expiry),
 * reports come from `report` with the force in place; `down` fails every call as an unreachable Redis would.
 */
export function fakeBreakerAdmin(report: (dependency: string) => DependencyReport = emptyReport) {
  const forces = new Map<string, BreakerForce>();
  const state = { down: false, now: 1_800_000_000_000 };
  const check = () => {
    if (state.down) throw new Error('connect ECONNREFUSED');
  };
  const deps: AdminBreakersRouteDeps['breakers'] = {
    store: {
      force: async (dependency: string, mode: ForceMode, durationMs: number) => {
        check();
        const forced = { mode, until: state.now + durationMs };
        forces.set(dependency, forced);
        return forced;
      },
      clearForce: async (dependency: string) => {
        check();
        return forces.delete(dependency);
      },
    },
    reports: {
      all: async () => {
        check();
        return ['anthropic'].map((d) => {
          const r = report(d);
          return { ...r, breaker: { ...r.breaker, forced: forces.get(d) ?? null } };
        });
      },
    },
  };
  return { deps, forces, state };
}

export function emptyReport(dependency: string): DependencyReport {
  return {
    dependency,
    kind: 'llm',
    at: 1_800_000_000_000,
    breaker: {
      state: 'closed',
      retryAt: null,
      closedAt: null,
      forced: null,
      probesInFlight: 0,
      window: { calls: 0, failures: 0, slowCalls: 0 },
      policy: { windowMs: 30_000, minimumCalls: 5, failureThreshold: 5, failureRateThreshold: 0.5, slowCallMs: 60_000, slowCallRateThreshold: 1, openMs: 5_000 },
    },
    pacing: { buckets: [], notBefore: null },
    retryBudget: { calls: 0, retries: 0, allowed: 10, ratio: 0.1, windowMs: 60_000 },
  };
}
