import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ownershipFile, readOwnership, writeOwnership, type OwnershipRecord } from '../../../../src/dev/infra/ownership.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sluice-owner-'));
});
afterEach(() => rm(dir, { recursive: true, force: true }));

describe('ownership record', () => {
  it('is empty when no file exists: we own nothing', async () => {
    expect(await readOwnership(dir)).toEqual({});
  });

  it('round-trips and leaves no temporary file behind', async () => {
    const record: OwnershipRecord = {
      kafka: { port: 19192, controllerPort: 19193, nodes: [{ nodeId: 1, pid: 10, port: 19192, controllerPort: 19193 }], startedAt: '2025-01-01T00:00:00.000Z' },
      redis: { pid: 11, url: 'redis://127.0.0.1:6379', startedAt: '2025-01-01T00:00:00.000Z' },
    };
    await writeOwnership(dir, record);
    expect(await readOwnership(dir)).toEqual(record);
    expect(await readdir(dir)).toEqual(['infra.json']);
  });

  it('treats a corrupt file as owning nothing rather than failing', async () => {
    await writeFile(ownershipFile(dir), '{"kafka": ');
    expect(await readOwnership(dir)).toEqual({});
    await writeFile(ownershipFile(dir), 'null');
    expect(await readOwnership(dir)).toEqual({});
  });
});
