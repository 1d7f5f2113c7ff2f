import { describe, expect, it } from 'vitest';
import { parseVariant } from '../../../../src/dev/bench/admission-bench.js';

describe('parseVariant', () => {
  it('runs this checkout with write-behind on or off, or another checkout as configured', () => {
    expect(parseVariant('write-behind')).toMatchObject({ label: 'write-behind', writeBehind: true });
    expect(parseVariant('no-write-behind')).toMatchObject({ label: 'no-write-behind', writeBehind: false });
    expect(parseVariant('write-behind').cli).toMatch(/dist\/cli\/main\.js$/);
    expect(parseVariant('checkout:/srv/sluice-main')).toEqual({ label: 'sluice-main', cli: '/srv/sluice-main/dist/cli/main.js' });
    expect(() => parseVariant('checkout:')).toThrow(/checkout:<dir>/);
    expect(() => parseVariant('batching')).toThrow(/checkout:<dir>/);
  });
});
