import { randomUUID } from 'node:crypto';
import { open, readFile, rm, stat } from 'node:fs/promises';
import type { Logger } from '../../obs/logger.js';
import { isAlive, sleep } from './process.js';

/**
 * An exclusive lock between processes on one machine: a file created with O_EXCL that holds the
 * owner's pid. A lock whose owner died is stale and is taken over, so a crashed `infra up` does
 * not block the next one forever.
 */
export interface LockOptions {
  /** Upper bound on waiting for another holder; it must exceed the longest section it guards. */
  timeoutMs: number;
  logger?: Logger;
}

interface LockContent {
  pid: number;
  token: string;
}

// Between O_EXCL create and the write of its content a lock file is briefly empty; only an empty
// or garbled file older than this is treated as abandoned.
const UNREADABLE_GRACE_MS = 10_000;
const RETRY_MS = 200;

export function parseLockContent(raw: string): LockContent | undefined {
  try {
    const { pid, token } = JSON.parse(raw) as Partial<LockContent>;
    return typeof pid === 'number' && Number.isInteger(pid) && pid > 0 && typeof token === 'string'
      ? { pid, token }
      : undefined;
  } catch {
    return undefined;
  }
}

async function tryCreate(path: string, content: LockContent): Promise<boolean> {
  try {
    const file = await open(path, 'wx');
    try {
      await file.writeFile(JSON.stringify(content));
    } finally {
      await file.close();
    }
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  }
}

async function ageMs(path: string): Promise<number> {
  const s = await stat(path).catch(() => undefined);
  return s ? Date.now() - s.mtimeMs : 0;
}

/** Whether the lock file content `raw` belongs to a holder that no longer exists. */
export async function isStaleLock(path: string, raw: string): Promise<boolean> {
  const holder = parseLockContent(raw);
  if (holder) return !(await isAlive(holder.pid));
  return (await ageMs(path)) > UNREADABLE_GRACE_MS;
}

/**
 * Removes a stale lock, but only if it still holds what we judged stale: two waiters that both
 * saw the same dead holder must not have the slower one delete the faster one's fresh lock. A
 * short-lived `.break` file, itself O_EXCL, serialises the check-and-remove. Returns false if
 * another process is breaking it right now.
 */
async function breakStaleLock(path: string, judgedRaw: string): Promise<boolean> {
  const breaker = `${path}.break`;
  if ((await ageMs(breaker)) > UNREADABLE_GRACE_MS) await rm(breaker, { force: true });
  const file = await open(breaker, 'wx').catch(() => undefined);
  if (!file) return false;
  try {
    await file.close();
    const current = await readFile(path, 'utf8').catch(() => undefined);
    if (current === judgedRaw) await rm(path, { force: true });
    return true;
  } finally {
    await rm(breaker, { force: true });
  }
}

/** Waits for and takes the lock; resolves to a function that releases it. */
export async function acquireLock(path: string, opts: LockOptions): Promise<() => Promise<void>> {
  const mine: LockContent = { pid: process.pid, token: randomUUID() };
  const deadline = Date.now() + opts.timeoutMs;
  let reportedHolder: string | undefined;
  while (!(await tryCreate(path, mine))) {
    const raw = await readFile(path, 'utf8').catch(() => undefined);
    if (raw !== undefined && (await isStaleLock(path, raw))) {
      opts.logger?.warn({ lock: path, holder: raw }, 'taking over a stale lock');
      if (await breakStaleLock(path, raw)) continue;
    }
    const holder = (raw && parseLockContent(raw)?.pid.toString()) ?? 'unknown';
    if (Date.now() >= deadline) {
      throw new Error(
        `timed out after ${opts.timeoutMs} ms waiting for lock ${path} held by pid ${holder}; ` +
          'if that process is not a Sluice command, delete the file',
      );
    }
    if (reportedHolder !== holder) {
      opts.logger?.info({ lock: path, holderPid: holder }, 'waiting for another process to release the lock');
      reportedHolder = holder;
    }
    await sleep(RETRY_MS);
  }
  return async () => {
    const raw = await readFile(path, 'utf8').catch(() => undefined);
    if (raw !== undefined && parseLockContent(raw)?.token === mine.token) await rm(path, { force: true });
  };
}

export async function withLock<T>(path: string, opts: LockOptions, fn: () => Promise<T>): Promise<T> {
  const release = await acquireLock(path, opts);
  try {
    return await fn();
  } finally {
    await release();
  }
}
