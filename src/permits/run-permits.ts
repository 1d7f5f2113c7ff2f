import type { SluiceConfig } from '../config/schema.js';
import type { RunRequested } from '../events/schemas.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import type { RunPermitAnswer, RunPermitSource } from './run-permit-source.js';
import { StepError } from '../steps/step-error.js';
import type { RedisKeys } from '../redis/keys.js';
import type { LeaseKeeper } from './lease-keeper.js';
import { WaiterBook, type PermitWaiter } from './oldest-waiters.js';
import { dependencyCallScopes, limitField, runScopes, type PermitScope } from './permit-scopes.js';
import type { PermitLease, PermitStore } from './permit-store.js';
import type { PermitWakeups } from './permit-wakeups.js';

export interface PermitDeps {
  config: SluiceConfig;
  keys: RedisKeys;
  store: Pick<PermitStore, 'tryAcquire' | 'release'>;
  keeper: Pick<LeaseKeeper, 'keep' | 'release'>;
  wakeups: Pick<PermitWakeups, 'onWake' | 'fallbackPollMs'>;
  metrics: Metrics;
  logger: Logger;
}

/** Fallback polls a refused tenant's claim on a dependency's fair share outlives its last try by. */
const WAITING_CLAIM_POLLS = 3;

const BLOCKED_BY = { global: 'global', class: 'class', tenant: 'tenant', workflow: 'workflow' } as const;

/** Takes a lease at the given scopes and keeps renewing it until released. */
async function takeLease(deps: PermitDeps, scopes: readonly PermitScope[], owner: string, runId: string) {
  const ttl = deps.config.processor.permitLeaseMs;
  const answer = await deps.store.tryAcquire(scopes, ttl, owner);
  if (!answer.granted) return answer;
  const lease = answer.lease;
  try {
    deps.keeper.keep(lease, (lost: PermitLease) => {
      // The run goes on (a call in flight cannot be recalled), but its caps may be exceeded now.
      deps.metrics.permitLeasesLost.inc();
      deps.logger.error({ runId, scopes: lost.scopes }, 'a permit lease was lost (not renewed in time); caps may be exceeded until this run ends');
    });
  } catch (err) {
    // A lease nobody renews or releases would hold its permits from every processor until it lapses.
    await deps.store.release(lease);
    throw err;
  }
  return { granted: true as const, release: () => deps.keeper.release(lease).then(() => undefined) };
}

/** Run permits (global, batch share, tenant, workflow) from Redis, for the dispatcher. */
export class RedisRunPermits implements RunPermitSource {
  constructor(private readonly deps: PermitDeps) {}

  async tryAcquire(run: RunRequested): Promise<RunPermitAnswer> {
    const scopes = runScopes(this.deps.config, this.deps.keys, { tenantId: run.tenantId, workflow: run.workflow, runClass: run.class });
    const answer = await takeLease(this.deps, scopes, `${run.runId}:${run.attempt}`, run.runId);
    if (!answer.granted) {
      const kind = answer.blockedBy.split(':')[0] as keyof typeof BLOCKED_BY;
      return { granted: false, blockedBy: BLOCKED_BY[kind] ?? 'global' };
    }
    return { granted: true, permits: { release: answer.release } };
  }

  onWake(listener: () => void): () => void {
    return this.deps.wakeups.onWake(() => listener());
  }
}

/**
 * Dependency permits, held around each LLM or tool call: a call waits for one (woken by
 * releases anywhere, or the fallback poll) until the run's deadline, and then gives up.
 */
export class RedisDependencyPermits {
  private readonly waiting = new WaiterBook();

  constructor(
    private readonly deps: PermitDeps,
    /** The share of its limit a dependency may use now: below 1 while it ramps up after its breaker closed. */
    private readonly shareNow: (dependency: string) => number = () => 1,
  ) {}

  async acquire(dependency: string, run: RunRequested, now: () => number = Date.now): Promise<() => Promise<void>> {
    const askedAt = now();
    let leave: (() => void) | undefined;
    try {
      for (;;) {
        // Asked again on every try: a ramp-up grows while calls wait. A waiting tenant's claim lasts
        // a few fallback polls, so it holds between tries and lapses soon after its calls stop waiting.
        const scopes = dependencyCallScopes(this.deps.config, this.deps.keys, dependency, run.tenantId, {
          share: this.shareNow(dependency),
          claimMs: WAITING_CLAIM_POLLS * this.deps.wakeups.fallbackPollMs,
        });
        const answer = await takeLease(this.deps, scopes, `${run.runId}:${run.attempt}:${dependency}`, run.runId);
        if (answer.granted) return answer.release;
        const remaining = run.deadline - now();
        if (remaining <= 0) throw new StepError('deadline', dependency, `${dependency}: no permit before the deadline (${answer.count}/${answer.limit} in use)`, false);
        leave ??= this.waiting.enter([limitField('dependency', dependency)], askedAt);
        await this.waitForWake(Math.min(remaining, this.deps.wakeups.fallbackPollMs));
      }
    } finally {
      leave?.();
    }
  }

  /** The calls waiting for a dependency's permits now, each since its first try. */
  waiters(): Iterable<PermitWaiter> {
    return this.waiting.waiters();
  }

  private waitForWake(maxMs: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        unsubscribe();
        resolve();
      };
      const timer = setTimeout(done, maxMs);
      const unsubscribe = this.deps.wakeups.onWake(done);
    });
  }
}
