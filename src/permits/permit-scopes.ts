import { ownEntry } from '../config/lookup.js';
import type { SluiceConfig } from '../config/schema.js';
import type { RunClass } from '../events/schemas.js';
import type { RedisKeys } from '../redis/keys.js';
import { limitAtShare } from '../util/limit-share.js';
import { adaptiveBounds } from './adaptive-limit-policy.js';

/** The scopes whose caps an operator can change at run time (`PUT /v1/admin/limits`). */
export const LIMIT_SCOPES = ['global', 'tenant', 'workflow', 'dependency'] as const;
export type LimitScope = (typeof LIMIT_SCOPES)[number];

/** One concurrency scope of an acquisition: where its holders are and where its limit comes from. */
export interface PermitScope {
  /** `global`, `class:batch`, `tenant:<id>`, `workflow:<name>` or `dependency:<name>`; announced on release. */
  name: string;
  /** Its zset of lease tokens. */
  key: string;
  /** Field of the limits hash that, when set, replaces `defaultLimit` (the batch class reads `global`). */
  limitField: string;
  defaultLimit: number;
  /** Part of the limit this scope may use; below 1 for the batch class and a ramping dependency. */
  share: number;
  /** A dependency's adaptive concurrency figure, which holds the limit down: its hash and its max. */
  adaptive?: { key: string; max: number };
  /**
   * A tenant's fair part of an earlier scope of the same acquisition (a dependency): that scope's
   * limit in force, split evenly among the tenants with a live claim in `waitingKey` (fairShareLimit).
   * `limitField`, `defaultLimit` and `share` are not read for it.
   */
  fairShare?: FairShare;
}

/** Which shared scope a tenant's part divides, and where the tenants waiting for it claim their place. */
export interface FairShare {
  /** The shared scope's name (an earlier scope of the acquisition). */
  of: string;
  /** Zset of the tenants with a call waiting, each scored with the expiry of its claim. */
  waitingKey: string;
  /** Zset of this tenant's waiting calls, each scored with the expiry of its claim. */
  waitingCallsKey: string;
  /** This acquisition's tenant. */
  tenant: string;
  /** How long a refused call's claim lasts unless it tries again. */
  claimMs: number;
}

/** Field of the limits hash holding a scope's run-time limit; also that scope's name. */
export function limitField(scope: LimitScope, name?: string): string {
  return scope === 'global' ? 'global' : `${scope}:${name}`;
}

/** A scope's limit in config, or undefined when it names no configured tenant, workflow or dependency. */
export function configuredLimit(config: SluiceConfig, scope: LimitScope, name = ''): number | undefined {
  switch (scope) {
    case 'global':
      return config.limits.global;
    case 'tenant':
      return ownEntry(config.tenants, name)?.maxConcurrency;
    case 'workflow':
      return ownEntry(config.workflows, name)?.maxConcurrency;
    case 'dependency':
      return ownEntry(config.dependencies, name)?.maxConcurrency;
  }
}

/** Concurrency slots a class may use: batch gets its share of the global cap, interactive all of it. */
export function slotsFor(runClass: RunClass, globalLimit: number, batchShare: number): number {
  return Math.max(1, runClass === 'interactive' ? globalLimit : limitAtShare(globalLimit, batchShare));
}

function configuredScope(config: SluiceConfig, keys: RedisKeys, scope: LimitScope, name?: string): PermitScope {
  const defaultLimit = configuredLimit(config, scope, name);
  if (defaultLimit === undefined) throw new Error(`no ${scope} "${name}" in the configuration`);
  const field = limitField(scope, name);
  return { name: field, key: keys.permitScope(field), limitField: field, defaultLimit, share: 1 };
}

/**
 * The scopes a run holds for its whole execution, in the order a refusal is reported: global first
 * (nothing can start), then the batch class's share, the tenant and the workflow.
 */
export function runScopes(config: SluiceConfig, keys: RedisKeys, run: { tenantId: string; workflow: string; runClass: RunClass }): PermitScope[] {
  const global = configuredScope(config, keys, 'global');
  const batch: PermitScope[] =
    run.runClass === 'batch' ? [{ ...global, name: 'class:batch', key: keys.permitScope('class:batch'), share: config.limits.batchShare }] : [];
  return [global, ...batch, configuredScope(config, keys, 'tenant', run.tenantId), configuredScope(config, keys, 'workflow', run.workflow)];
}

/** The names of the scopes runScopes gives a run, for what does not need their keys or limits. */
export function runScopeNames(run: { tenantId: string; workflow: string; runClass: RunClass }): string[] {
  return ['global', ...(run.runClass === 'batch' ? ['class:batch'] : []), limitField('tenant', run.tenantId), limitField('workflow', run.workflow)];
}

/**
 * The scope held around each call to a dependency (an LLM or a tool), retries included; `share`
 * is the part of its limit in force it may use now (below 1 while it ramps up after a close).
 */
export function dependencyScope(config: SluiceConfig, keys: RedisKeys, dependency: string, share = 1): PermitScope {
  const scope = { ...configuredScope(config, keys, 'dependency', dependency), share };
  const bounds = adaptiveBounds(config.dependencies[dependency]!);
  return bounds ? { ...scope, adaptive: { key: keys.adaptiveLimit(dependency), max: bounds.max } } : scope;
}

/**
 * The scopes a call to a dependency takes for a tenant: the dependency's, and, unless the
 * dependency opts out (`tenantFairShare: false`), the tenant's fair part of it, so that a tenant
 * holding the whole cap gives the next permits to the tenants waiting behind it.
 */
export function dependencyCallScopes(config: SluiceConfig, keys: RedisKeys, dependency: string, tenantId: string, opts: { share?: number; claimMs: number }): PermitScope[] {
  const shared = dependencyScope(config, keys, dependency, opts.share);
  if (!config.dependencies[dependency]!.tenantFairShare) return [shared];
  const field = `${shared.name}:tenant:${tenantId}`;
  const fairShare = { of: shared.name, waitingKey: keys.permitWaiting(dependency), waitingCallsKey: keys.permitWaitingCalls(dependency, tenantId), tenant: tenantId, claimMs: opts.claimMs };
  return [shared, { name: field, key: keys.permitScope(field), limitField: field, defaultLimit: shared.defaultLimit, share: 1, fairShare }];
}
