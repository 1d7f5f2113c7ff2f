import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rename, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { APT_INSTALL_BOUND_MS } from './apt.js';
import { withLock } from './lock.js';
import { findExecutable, runChecked, runCommand } from './process.js';

/** Debian bookworm's `prometheus` package (2.42) carries promtool next to the server binary. */
const PACKAGE = 'prometheus';
const APT_TIMEOUT_MS = APT_INSTALL_BOUND_MS / 2;
const DPKG_TIMEOUT_MS = 60_000;
/** Longest one fetch can take: download, update and download again, extract, check the binary. */
const FETCH_BOUND_MS = 3 * APT_TIMEOUT_MS + 2 * DPKG_TIMEOUT_MS;
/** Longest `ensurePromtool` can take: waiting for another process's fetch, then its own. */
export const PROMTOOL_FETCH_BOUND_MS = 2 * FETCH_BOUND_MS;

/**
 * The path of a promtool binary for the tests (rules, rule unit tests, metrics lint), taken out
 * of Debian's `prometheus` package without installing it: `apt-get download` and `dpkg -x` into
 * `<cacheDir>/promtool`, reused afterwards. Nothing is installed and no service is started. When
 * apt does not know the package yet (a fresh machine with no package lists), root runs
 * `apt-get update` once and tries again. Each apt-get call is bounded in time. The cache is under
 * the local state dir, as the tests' infrastructure is.
 */
export async function ensurePromtool(cacheDir = resolve(process.env.SLUICE_STATE_DIR ?? '.sluice', 'tools')): Promise<string> {
  const binary = join(cacheDir, 'promtool', 'promtool');
  if (existsSync(binary)) return binary;
  await mkdir(cacheDir, { recursive: true });
  // Test files run in parallel processes: one downloads, the others wait and reuse it.
  return withLock(join(cacheDir, 'promtool.lock'), { timeoutMs: FETCH_BOUND_MS }, async () => {
    if (existsSync(binary)) return binary;
    const work = await mkdtemp(join(cacheDir, 'promtool-'));
    try {
      const deb = await downloadPackage(work);
      await runChecked('dpkg', ['-x', deb, join(work, 'root')], { timeoutMs: DPKG_TIMEOUT_MS });
      const extracted = join(work, 'root', 'usr', 'bin', 'promtool');
      if (!existsSync(extracted)) throw new Error(`${deb} holds no usr/bin/promtool`);
      await mkdir(join(work, 'promtool'));
      await rename(extracted, join(work, 'promtool', 'promtool'));
      await runChecked(join(work, 'promtool', 'promtool'), ['--version'], { timeoutMs: DPKG_TIMEOUT_MS });
      // A leftover without the binary (an interrupted copy by hand) would block the rename.
      await rm(join(cacheDir, 'promtool'), { recursive: true, force: true });
      await rename(join(work, 'promtool'), join(cacheDir, 'promtool'));
      return binary;
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  });
}

/** `apt-get download` into `dir`; the .deb's path. */
async function downloadPackage(dir: string): Promise<string> {
  const aptGet = await findExecutable('apt-get');
  if (!aptGet) throw new Error(`promtool is taken from Debian's ${PACKAGE} package, and this machine has no apt-get`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const download = () => runCommand(aptGet, ['download', PACKAGE], { cwd: dir, timeoutMs: APT_TIMEOUT_MS, env });
  let result = await download();
  if (result.code !== 0 && process.getuid?.() === 0) {
    await runChecked(aptGet, ['update'], { timeoutMs: APT_TIMEOUT_MS, env });
    result = await download();
  }
  if (result.code !== 0) {
    throw new Error(`apt-get download ${PACKAGE} failed (exit ${result.code}); as root, run apt-get update first:\n${result.output.trim()}`);
  }
  const deb = (await readdir(dir)).find((f) => f.startsWith(`${PACKAGE}_`) && f.endsWith('.deb'));
  if (!deb) throw new Error(`apt-get download ${PACKAGE} succeeded but left no .deb in ${dir}`);
  return join(dir, deb);
}
