import type { Logger } from '../../obs/logger.js';
import { findExecutable, runChecked } from './process.js';

const APT_TIMEOUT_MS = 5 * 60_000; // per apt-get command
/** Longest `ensureExecutable` can take when it has to install. */
export const APT_INSTALL_BOUND_MS = 2 * APT_TIMEOUT_MS;

/**
 * The path of `name`, installing Debian package `pkg` first if it is missing. Only root can
 * install; anyone else gets an error that says what to install, or `alternative` to avoid it.
 */
export async function ensureExecutable(
  name: string,
  pkg: string,
  alternative: string,
  logger: Logger,
): Promise<{ path: string; installed: boolean }> {
  const found = await findExecutable(name);
  if (found) return { path: found, installed: false };
  const aptGet = await findExecutable('apt-get');
  if (!aptGet || process.getuid?.() !== 0) {
    throw new Error(`${name} is not installed: install ${pkg} (apt-get install -y ${pkg}), or ${alternative}`);
  }
  logger.warn({ pkg }, `${name} is missing: installing ${pkg} with apt-get`);
  const aptEnv = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  await runChecked(aptGet, ['update'], { timeoutMs: APT_TIMEOUT_MS, env: aptEnv });
  await runChecked(aptGet, ['install', '-y', pkg], { timeoutMs: APT_TIMEOUT_MS, env: aptEnv });
  const path = await findExecutable(name);
  if (!path) throw new Error(`apt-get installed ${pkg} but ${name} is still not on PATH`);
  return { path, installed: true };
}
