import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { packageRoot } from '../util/package-root.js';

/** Every Lua script in `lua/`, one atomic operation each, with how many of its arguments are keys. */
export const SCRIPTS = {
  tokenBucketTake: { file: 'token-bucket-take.lua', keys: 1 },
  backlogAdmit: { file: 'backlog-admit.lua', keys: 3 },
  backlogRelease: { file: 'backlog-release.lua', keys: 4 },
  idempotencyClaim: { file: 'idempotency-claim.lua', keys: 1 },
  idempotencySettle: { file: 'idempotency-settle.lua', keys: 1 },
} as const;

export type ScriptName = keyof typeof SCRIPTS;

type ScriptCommand = (...keysAndArgs: (string | number)[]) => Promise<unknown>;

const sources = new Map<ScriptName, string>();

function source(name: ScriptName): string {
  let text = sources.get(name);
  if (text === undefined) {
    text = readFileSync(join(packageRoot(), 'lua', SCRIPTS[name].file), 'utf8');
    sources.set(name, text);
  }
  return text;
}

/**
 * Registers the scripts on a client once. ioredis then calls each by its SHA (EVALSHA) and sends
 * the source only when the server does not know it yet (after a restart or failover).
 */
export class LuaScripts {
  constructor(private readonly redis: Redis) {
    for (const name of Object.keys(SCRIPTS) as ScriptName[]) {
      if (typeof (redis as unknown as Record<string, unknown>)[name] !== 'function') {
        redis.defineCommand(name, { numberOfKeys: SCRIPTS[name].keys, lua: source(name) });
      }
    }
  }

  run(name: ScriptName, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    if (keys.length !== SCRIPTS[name].keys) return Promise.reject(new Error(`${name} takes ${SCRIPTS[name].keys} keys, got ${keys.length}`));
    const command = (this.redis as unknown as Record<ScriptName, ScriptCommand>)[name];
    return command.call(this.redis, ...keys, ...args);
  }
}
