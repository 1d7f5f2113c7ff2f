import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { backwardIncompatibilities } from '../../../src/events/schema-compatibility.js';
import { packageRoot } from '../../../src/util/package-root.js';

const SCHEMAS = join(packageRoot(), 'schemas');
const HISTORY = join(SCHEMAS, 'history');
const NAMES = ['RunRequested', 'RunStatusChanged', 'DeadLetter', 'RunSubmission'];

function versions(name: string): string[] {
  return readdirSync(join(HISTORY, name))
    .filter((file) => /^v\d+\.avsc$/.test(file))
    .sort((a, b) => Number(a.slice(1, -5)) - Number(b.slice(1, -5)));
}

describe('schema history (schemas/history/README.md)', () => {
  it('keeps a history for every bundled schema, numbered from v1 without gaps', () => {
    const bundled = readdirSync(SCHEMAS).filter((f) => f.endsWith('.avsc'));
    expect(bundled.sort()).toEqual(NAMES.map((n) => `${n}.avsc`).sort());
    for (const name of NAMES) {
      expect(versions(name)).toEqual(versions(name).map((_, i) => `v${i + 1}.avsc`));
    }
  });

  it.each(NAMES)('the current %s reads data written with every released version', (name) => {
    const current = readFileSync(join(SCHEMAS, `${name}.avsc`), 'utf8');
    for (const version of versions(name)) {
      const old = readFileSync(join(HISTORY, name, version), 'utf8');
      expect({ version, problems: backwardIncompatibilities(current, old) }).toEqual({ version, problems: [] });
    }
  });
});
