import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../../src/util/package-root.js';

const src = join(packageRoot(), 'src');
const dev = join(src, 'dev');
const ENTRY = join(dev, 'index.ts');

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? tsFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}

/** Every relative module a file imports, static or dynamic, as the .ts file it names. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const specifiers = [...text.matchAll(/(?:\bfrom\s*|\bimport\s*\(?\s*)['"](\.{1,2}\/[^'"]+)['"]/g)].map((m) => m[1]!);
  return specifiers.map((s) => resolve(dirname(file), s).replace(/\.js$/, '.ts'));
}

describe('the product and the dev tooling', () => {
  it('finds the imports it checks, static and dynamic', () => {
    expect(importsOf(join(src, 'roles', 'start-roles.ts'))).toContain(ENTRY);
    expect(importsOf(join(dev, 'bench', 'main.ts'))).toContain(join(dev, 'bench', 'processor-bench.ts'));
  });

  it('meet only at src/dev/index.ts: nothing outside src/dev imports another file inside it', () => {
    const crossings = tsFiles(src)
      .filter((file) => !file.startsWith(`${dev}/`))
      .flatMap((file) => importsOf(file).filter((target) => target.startsWith(`${dev}/`) && target !== ENTRY).map((target) => `${relative(src, file)} -> ${relative(src, target)}`));
    expect(crossings).toEqual([]);
  });
});
