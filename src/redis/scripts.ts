import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { RedisClient } from './client.js';
import { keysOutsideFirstSlot } from './key-slot.js';
import { packageRoot } from '../util/package-root.js';

/**
 * Every Lua script in `lua/`, one atomic operation each, with how many of its arguments are keys
 * ('any': the caller decides, as the permit scripts take one key per scope).
 */
export const SCRIPTS = {
  tokenBucketTake: { file: 'token-bucket-take.lua', keys: 1 },
  tokenBucketSettle: { file: 'token-bucket-settle.lua', keys: 2 },
  tokenEstimateFold: { file: 'token-estimate-fold.lua', keys: 1 },
  backlogAdmit: { file: 'backlog-admit.lua', keys: 3 },
  backlogRelease: { file: 'backlog-release.lua', keys: 4 },
  idempotencyClaim: { file: 'idempotency-claim.lua', keys: 1 },
  idempotencySettle: { file: 'idempotency-settle.lua', keys: 1 },
  idempotencyAnswer: { file: 'idempotency-answer.lua', keys: 1 },
  permitsAcquire: { file: 'permits-acquire.lua', keys: 'any' },
  permitsRenew: { file: 'permits-renew.lua', keys: 'any' },
  permitsRelease: { file: 'permits-release.lua', keys: 'any' },
  adaptiveLimitUpdate: { file: 'adaptive-limit-update.lua', keys: 1 },
  breakerAdmit: { file: 'breaker-admit.lua', keys: 3 },
  breakerRecord: { file: 'breaker-record.lua', keys: 4 },
  breakerTally: { file: 'breaker-tally.lua', keys: 3 },
  breakerForce: { file: 'breaker-force.lua', keys: 1 },
  retryBudgetTake: { file: 'retry-budget-take.lua', keys: 1 },
  pacingReserve: { file: 'pacing-reserve.lua', keys: 4 },
  pacingSettle: { file: 'pacing-settle.lua', keys: 2 },
  pacingObserve: { file: 'pacing-observe.lua', keys: 2 },
  runProgressOpen: { file: 'run-progress-open.lua', keys: 3 },
  runProgressRecord: { file: 'run-progress-record.lua', keys: 2 },
  runProgressCalls: { file: 'run-progress-calls.lua', keys: 1 },
  runProgressEnd: { file: 'run-progress-end.lua', keys: 1 },
  processorStatePublish: { file: 'processor-state-publish.lua', keys: 1 },
} as const satisfies Record<string, { file: string; keys: number | 'any' }>;

export type ScriptName = keyof typeof SCRIPTS;

type ScriptCommand = (...keysAndArgs: (string | number)[]) => Promise<unknown>;

const sources = new Map<ScriptName, string>();

/** A script's first line naming the shared Lua it needs: `-- uses: token-bucket-refill[, …]`. */
const USES_LINE = /^-- uses: *(.+)$/;

function luaFile(relativePath: string): string {
  return readFileSync(join(packageRoot(), 'lua', relativePath), 'utf8');
}

/** The names of the `lua/lib/` files a script's first line asks for. */
export function sharedLuaNamedBy(script: string): string[] {
  const uses = USES_LINE.exec(script.split('\n', 1)[0]!);
  return uses ? uses[1]!.split(',').map((lib) => lib.trim()) : [];
}

/**
 * The Lua a script is loaded as: its file, behind the files of `lua/lib/` its first line names
 * (local functions shared by several scripts). Read once per process, so the SHA stays the same.
 */
export function scriptSource(name: ScriptName): string {
  let text = sources.get(name);
  if (text === undefined) {
    const script = luaFile(SCRIPTS[name].file);
    text = [...sharedLuaNamedBy(script).map((lib) => luaFile(join('lib', `${lib}.lua`))), script].join('\n');
    sources.set(name, text);
  }
  return text;
}

/**
 * Registers the scripts on a client once. ioredis then calls each by its SHA (EVALSHA) and sends
 * the source only when the server does not know it yet (after a restart or failover).
 */
export class LuaScripts {
  constructor(private readonly redis: RedisClient) {
    for (const name of Object.keys(SCRIPTS) as ScriptName[]) {
      if (typeof (redis as unknown as Record<string, unknown>)[name] !== 'function') {
        const keys = SCRIPTS[name].keys;
        redis.defineCommand(name, { ...(keys === 'any' ? {} : { numberOfKeys: keys }), lua: scriptSource(name) });
      }
    }
  }

  run(name: ScriptName, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    const expected = SCRIPTS[name].keys;
    if (expected !== 'any' && keys.length !== expected) return Promise.reject(new Error(`${name} takes ${expected} keys, got ${keys.length}`));
    // A cluster refuses a script whose keys span slots; refusing it here too keeps single-node runs honest.
    const strays = keysOutsideFirstSlot(keys);
    if (strays.length > 0) return Promise.reject(new Error(`${name}: every key must be in the slot of ${keys[0]}, but ${strays.join(', ')} are not`));
    const command = (this.redis as unknown as Record<ScriptName, ScriptCommand>)[name];
    // Without a fixed count ioredis expects the count as the first argument, as EVAL does.
    if (expected === 'any') return command.call(this.redis, keys.length, ...keys, ...args);
    return command.call(this.redis, ...keys, ...args);
  }
}
