import { spawn } from 'node:child_process';
import { constants as fsConstants } from 'node:fs';
import { access, open, readdir, readFile, writeFile } from 'node:fs/promises';
import { delimiter, join } from 'node:path';
import { connect } from 'node:net';

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Polls `check` until it returns a value other than undefined, or `timeoutMs` passes.
 * Returns undefined on timeout so that callers can build an error that says what they waited for.
 */
export async function waitFor<T>(
  timeoutMs: number,
  intervalMs: number,
  check: () => Promise<T | undefined>,
): Promise<T | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() >= deadline) return undefined;
    await sleep(Math.min(intervalMs, Math.max(0, deadline - Date.now())));
  }
}

function signalable(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * True if `pid` names a live process. A zombie counts as dead: it has exited and only waits for
 * its parent to reap it, which may take a moment when the parent is this very process.
 */
export async function isAlive(pid: number): Promise<boolean> {
  // EPERM counts as alive: it exists but belongs to another user.
  if (!signalable(pid)) return false;
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  // No stat file: either no /proc here, or the process was reaped between the two checks.
  if (stat === undefined) return signalable(pid);
  // The state field follows the parenthesised command name, which may itself contain ") ".
  const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  if (state !== 'Z') return true;
  // A multi-threaded process (a JVM being killed) can show its exited main thread as a zombie
  // while other threads still run and hold its sockets: it is gone only once they are.
  const tasks = await readdir(`/proc/${pid}/task`).catch(() => [] as string[]);
  return tasks.length > 1;
}

/** The process's command line with arguments joined by spaces, or undefined if it is gone. */
async function commandLine(pid: number): Promise<string | undefined> {
  const raw = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => undefined);
  return raw?.split('\0').filter(Boolean).join(' ');
}

export function parsePid(text: string): number | undefined {
  const trimmed = text.trim();
  if (!/^\d+$/.test(trimmed)) return undefined;
  const pid = Number(trimmed);
  return pid > 0 ? pid : undefined;
}

export async function readPidFile(path: string): Promise<number | undefined> {
  const text = await readFile(path, 'utf8').catch(() => undefined);
  return text === undefined ? undefined : parsePid(text);
}

export const writePidFile = (path: string, pid: number): Promise<void> => writeFile(path, `${pid}\n`);

export type PidFileState =
  | { state: 'running'; pid: number }
  | { state: 'stale'; pid?: number }
  | { state: 'absent' };

/**
 * Whether the process named by `pidFile` still runs. It counts only if its command line contains
 * every `marker`, which guards against the pid having been reused by an unrelated process; a file
 * that fails this test is stale. Read-only: callers remove stale files while holding the infra lock.
 */
export async function inspectPidFile(pidFile: string, markers: string[]): Promise<PidFileState> {
  const text = await readFile(pidFile, 'utf8').catch(() => undefined);
  if (text === undefined) return { state: 'absent' };
  const pid = parsePid(text);
  if (pid === undefined) return { state: 'stale' };
  if (await isAlive(pid)) {
    const cmd = (await commandLine(pid)) ?? '';
    if (markers.every((m) => cmd.includes(m))) return { state: 'running', pid };
  }
  return { state: 'stale', pid };
}

/** SIGTERM, then SIGKILL if the process outlives `graceMs`. Resolves once it is gone. */
export async function terminate(pid: number, graceMs: number): Promise<'terminated' | 'killed' | 'not-running'> {
  if (!(await isAlive(pid))) return 'not-running';
  process.kill(pid, 'SIGTERM');
  if (await waitFor(graceMs, 100, async () => ((await isAlive(pid)) ? undefined : true))) return 'terminated';
  process.kill(pid, 'SIGKILL');
  const gone = await waitFor(5_000, 100, async () => ((await isAlive(pid)) ? undefined : true));
  if (!gone) throw new Error(`process ${pid} survived SIGKILL for 5 s`);
  return 'killed';
}

export interface CommandResult {
  code: number | null;
  output: string;
}

/**
 * Runs a command to completion with its stdout and stderr captured together. The timeout kills
 * it (and its process group, since tools like mvn and apt-get spawn helpers) and rejects.
 */
export function runCommand(
  command: string,
  args: string[],
  opts: { timeoutMs: number; cwd?: string; env?: NodeJS.ProcessEnv },
): Promise<CommandResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: opts.cwd,
      env: opts.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const chunks: Buffer[] = [];
    child.stdout.on('data', (c: Buffer) => chunks.push(c));
    child.stderr.on('data', (c: Buffer) => chunks.push(c));
    const timer = setTimeout(() => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // The group is already gone.
      }
      reject(new Error(`${command} ${args.join(' ')} did not finish within ${opts.timeoutMs} ms`));
    }, opts.timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output: Buffer.concat(chunks).toString('utf8') });
    });
  });
}

/** Like `runCommand` but rejects on a non-zero exit, with the command's last output lines. */
export async function runChecked(
  command: string,
  args: string[],
  opts: { timeoutMs: number; cwd?: string; env?: NodeJS.ProcessEnv; okCodes?: number[] },
): Promise<CommandResult> {
  const result = await runCommand(command, args, opts);
  if (result.code === 0 || (result.code !== null && opts.okCodes?.includes(result.code))) return result;
  throw new Error(
    `${command} ${args.join(' ')} exited with ${result.code}:\n${lastLines(result.output, 30)}`,
  );
}

/** Absolute path of an executable found on PATH (plus the sbin dirs a non-login root shell may lack). */
export async function findExecutable(name: string, env: NodeJS.ProcessEnv = process.env): Promise<string | undefined> {
  const dirs = [...(env.PATH ?? '').split(delimiter), '/usr/local/sbin', '/usr/sbin', '/sbin'].filter(Boolean);
  for (const dir of dirs) {
    const candidate = join(dir, name);
    if (await access(candidate, fsConstants.X_OK).then(() => true, () => false)) return candidate;
  }
  return undefined;
}

export function lastLines(text: string, n: number): string {
  return text.trimEnd().split('\n').slice(-n).join('\n');
}

/** The last `n` lines of a file, or '' if it does not exist; reads at most its last 256 KiB. */
export async function tailFile(path: string, n: number): Promise<string> {
  const file = await open(path, 'r').catch(() => undefined);
  if (!file) return '';
  try {
    const { size } = await file.stat();
    const length = Math.min(size, 256 * 1024);
    const buf = Buffer.alloc(length);
    await file.read(buf, 0, length, size - length);
    return lastLines(buf.toString('utf8'), n);
  } finally {
    await file.close();
  }
}

/** True if something accepts TCP connections on 127.0.0.1:`port` (or the given host). */
export function isPortOpen(port: number, host = '127.0.0.1', timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host });
    const done = (open: boolean) => {
      socket.destroy();
      resolve(open);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}
