import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { acquireLock, isStaleLock, parseLockContent, withLock } from '../../../../src/dev/infra/lock.js';
import { isAlive, sleep, waitFor } from '../../../../src/dev/infra/process.js';

let dir: string;
let lock: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sluice-lock-'));
  lock = join(dir, 'infra.lock');
});
afterEach(() => rm(dir, { recursive: true, force: true }));

/** A lock file as another process would write it. */
const foreignLock = (pid: number) => writeFile(lock, JSON.stringify({ pid, token: 'other' }));

describe('acquireLock', () => {
  it('creates the lock file with our pid and removes it on release', async () => {
    const release = await acquireLock(lock, { timeoutMs: 1_000 });
    expect(parseLockContent(await readFile(lock, 'utf8'))?.pid).toBe(process.pid);
    await release();
    await expect(readFile(lock)).rejects.toThrow(/ENOENT/);
  });

  it('serialises concurrent holders', async () => {
    let inside = 0;
    let maxInside = 0;
    const section = () =>
      withLock(lock, { timeoutMs: 10_000 }, async () => {
        maxInside = Math.max(maxInside, ++inside);
        await sleep(20);
        inside--;
      });
    await Promise.all(Array.from({ length: 5 }, section));
    expect(maxInside).toBe(1);
  });

  it('waits for a live holder in another process, and takes over once it died', async () => {
    const holder = spawn('sleep', ['30']);
    await foreignLock(holder.pid!);
    await expect(acquireLock(lock, { timeoutMs: 300 })).rejects.toThrow(new RegExp(`held by pid ${holder.pid}`));

    const acquiring = acquireLock(lock, { timeoutMs: 5_000 });
    holder.kill('SIGKILL');
    const release = await acquiring;
    expect(parseLockContent(await readFile(lock, 'utf8'))?.pid).toBe(process.pid);
    await release();
  });

  it('takes over a lock left by a dead process at once', async () => {
    const child = spawn('true');
    await new Promise((resolve) => child.on('exit', resolve));
    await waitFor(2_000, 20, async () => ((await isAlive(child.pid!)) ? undefined : true));
    await foreignLock(child.pid!);
    const t0 = Date.now();
    const release = await acquireLock(lock, { timeoutMs: 5_000 });
    expect(Date.now() - t0).toBeLessThan(1_000);
    await release();
  });

  it('does not delete a lock that another holder took after ours was broken', async () => {
    const release = await acquireLock(lock, { timeoutMs: 1_000 });
    await foreignLock(process.pid); // as if someone had replaced our lock
    await release();
    expect(parseLockContent(await readFile(lock, 'utf8'))?.token).toBe('other');
  });
});

describe('parseLockContent', () => {
  it('accepts only a positive integer pid with a token', () => {
    expect(parseLockContent('{"pid":42,"token":"t"}')).toEqual({ pid: 42, token: 't' });
    // pid 0 or a negative pid would make kill(pid, 0) probe a process group and always look alive.
    expect(parseLockContent('{"pid":0,"token":"t"}')).toBeUndefined();
    expect(parseLockContent('{"pid":-1,"token":"t"}')).toBeUndefined();
    expect(parseLockContent('{"pid":1.5,"token":"t"}')).toBeUndefined();
    expect(parseLockContent('{"pid":42}')).toBeUndefined();
    expect(parseLockContent('null')).toBeUndefined();
    expect(parseLockContent('')).toBeUndefined();
  });
});

describe('isStaleLock', () => {
  it('treats an unreadable lock as held while it is fresh (its owner may be writing it)', async () => {
    await writeFile(lock, '');
    expect(await isStaleLock(lock, '')).toBe(false);
    const old = new Date(Date.now() - 60_000);
    await utimes(lock, old, old);
    expect(await isStaleLock(lock, '')).toBe(true);
  });
});
