import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  inspectPidFile,
  isAlive,
  lastLines,
  parsePid,
  runCommand,
  tailFile,
  terminate,
  waitFor,
} from '../../../../src/dev/infra/process.js';

/** The pid of a process that has exited and been reaped. */
async function deadPid(): Promise<number> {
  const child = spawn('true');
  await new Promise((resolve) => child.on('exit', resolve));
  await waitFor(2_000, 20, async () => ((await isAlive(child.pid!)) ? undefined : true));
  return child.pid!;
}

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sluice-process-'));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

describe('parsePid', () => {
  it('accepts a positive integer with surrounding whitespace only', () => {
    expect(parsePid(' 1234\n')).toBe(1234);
    expect(parsePid('0')).toBeUndefined();
    expect(parsePid('-5')).toBeUndefined();
    expect(parsePid('12ab')).toBeUndefined();
    expect(parsePid('')).toBeUndefined();
  });
});

describe('isAlive', () => {
  it('tells a live process from an exited one', async () => {
    expect(await isAlive(process.pid)).toBe(true);
    expect(await isAlive(await deadPid())).toBe(false);
  });
});

describe('inspectPidFile', () => {
  const file = () => join(dir, 'x.pid');

  it('reports a missing file as absent', async () => {
    expect(await inspectPidFile(join(dir, 'none.pid'), [])).toEqual({ state: 'absent' });
  });

  it('reports a live process whose command line matches as running', async () => {
    await writeFile(file(), `${process.pid}\n`);
    expect(await inspectPidFile(file(), [process.execPath])).toEqual({ state: 'running', pid: process.pid });
  });

  it('reports a dead pid, a reused pid (other command line) and garbage as stale', async () => {
    const dead = await deadPid();
    await writeFile(file(), `${dead}\n`);
    expect(await inspectPidFile(file(), [])).toEqual({ state: 'stale', pid: dead });

    await writeFile(file(), `${process.pid}\n`);
    expect(await inspectPidFile(file(), ['kafka.Kafka'])).toEqual({ state: 'stale', pid: process.pid });

    await writeFile(file(), 'not a pid');
    expect(await inspectPidFile(file(), [])).toEqual({ state: 'stale' });
  });
});

describe('terminate', () => {
  it('stops a process with SIGTERM', async () => {
    const child = spawn('sleep', ['30']);
    expect(await terminate(child.pid!, 5_000)).toBe('terminated');
    expect(await isAlive(child.pid!)).toBe(false);
  });

  it('falls back to SIGKILL when SIGTERM is ignored', async () => {
    const child = spawn('sh', ['-c', 'trap "" TERM; echo ready; exec sleep 30'], { stdio: ['ignore', 'pipe', 'ignore'] });
    await new Promise((resolve) => child.stdout!.once('data', resolve));
    expect(await terminate(child.pid!, 300)).toBe('killed');
  });

  it('reports a process that is already gone', async () => {
    expect(await terminate(await deadPid(), 100)).toBe('not-running');
  });
});

describe('waitFor', () => {
  it('returns the first defined value', async () => {
    let n = 0;
    expect(await waitFor(1_000, 1, async () => (++n === 3 ? 'done' : undefined))).toBe('done');
  });

  it('gives up after the timeout', async () => {
    const t0 = Date.now();
    expect(await waitFor(150, 20, async () => undefined)).toBeUndefined();
    expect(Date.now() - t0).toBeLessThan(1_000);
  });
});

describe('runCommand', () => {
  it('captures output and exit code', async () => {
    expect(await runCommand('sh', ['-c', 'echo out; echo err >&2; exit 3'], { timeoutMs: 5_000 })).toEqual({
      code: 3,
      output: expect.stringMatching(/out\n[\s\S]*err\n|err\n[\s\S]*out\n/),
    });
  });

  it('kills a command that outlives its timeout', async () => {
    await expect(runCommand('sleep', ['30'], { timeoutMs: 200 })).rejects.toThrow(/did not finish within 200 ms/);
  });
});

describe('tailFile and lastLines', () => {
  it('returns the last lines, or nothing for a missing file', async () => {
    const f = join(dir, 'log');
    await writeFile(f, Array.from({ length: 100 }, (_, i) => `line ${i}`).join('\n') + '\n');
    expect(await tailFile(f, 2)).toBe('line 98\nline 99');
    expect(await tailFile(join(dir, 'missing'), 5)).toBe('');
    expect(lastLines('a\nb\nc', 5)).toBe('a\nb\nc');
  });
});
