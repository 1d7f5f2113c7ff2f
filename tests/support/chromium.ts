import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';

/**
 * Debian's chromium, installed from apt when missing (as .ci/run does on a fresh machine): the
 * browser tests never let a tool download a browser of its own.
 */
export function ensureChromium(): string {
  if (existsSync(CHROMIUM)) return CHROMIUM;
  const sudo = process.getuid?.() === 0 ? [] : ['sudo', '-n'];
  const run = (...args: string[]) => {
    const [command, ...rest] = [...sudo, ...args];
    execFileSync(command!, rest, { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }, timeout: 600_000 });
  };
  run('apt-get', 'update');
  run('apt-get', 'install', '-y', '--no-install-recommends', 'chromium');
  if (!existsSync(CHROMIUM)) throw new Error(`apt-get installed chromium but ${CHROMIUM} is still missing`);
  return CHROMIUM;
}

/** A headless chromium with a fresh profile and nothing of its own on the network (no updates, sync or QUIC). */
export async function launchChromium(): Promise<BrowserContext> {
  return chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'sluice-chromium-')), {
    executablePath: ensureChromium(),
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout: 30_000,
  });
}
