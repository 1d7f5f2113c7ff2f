import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SCRIPTS, type ScriptName, scriptSource, sharedLuaNamedBy } from '../../../src/redis/scripts.js';
import { packageRoot } from '../../../src/util/package-root.js';

const lua = (path: string) => readFileSync(join(packageRoot(), 'lua', path), 'utf8');
const names = Object.keys(SCRIPTS) as ScriptName[];

describe('sharedLuaNamedBy', () => {
  it('reads the names from a first line `-- uses: …`', () => {
    expect(sharedLuaNamedBy('-- uses: token-bucket-refill\n-- Takes tokens\nreturn 1')).toEqual(['token-bucket-refill']);
    expect(sharedLuaNamedBy('-- uses: a,  b-c\nreturn 1')).toEqual(['a', 'b-c']);
  });

  it('names nothing without that first line, or when it stands further down', () => {
    expect(sharedLuaNamedBy('-- Takes tokens\nreturn 1')).toEqual([]);
    expect(sharedLuaNamedBy('-- Takes tokens\n-- uses: token-bucket-refill\nreturn 1')).toEqual([]);
    expect(sharedLuaNamedBy('')).toEqual([]);
  });
});

describe('scriptSource', () => {
  it('puts the shared Lua a script names in front of it, and leaves other scripts as their file', () => {
    for (const name of names) {
      const file = lua(SCRIPTS[name].file);
      const shared = sharedLuaNamedBy(file).map((lib) => lua(join('lib', `${lib}.lua`)));
      expect(scriptSource(name)).toBe([...shared, file].join('\n'));
    }
    expect(sharedLuaNamedBy(lua(SCRIPTS.tokenBucketTake.file))).toEqual(['token-bucket-refill']);
    expect(sharedLuaNamedBy(lua(SCRIPTS.tokenBucketSettle.file))).toEqual(['token-bucket-refill']);
  });

  it('every file in lua/lib is used by some script, and is no script of its own', () => {
    const used = new Set(names.flatMap((name) => sharedLuaNamedBy(lua(SCRIPTS[name].file))));
    const libs = readdirSync(join(packageRoot(), 'lua', 'lib')).map((f) => f.replace(/\.lua$/, ''));
    expect(libs.sort()).toEqual([...used].sort());
    expect(names.map((name) => SCRIPTS[name].file).filter((f) => f.includes('/'))).toEqual([]);
  });
});
