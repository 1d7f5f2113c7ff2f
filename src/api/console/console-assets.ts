import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { extname, join } from 'node:path';

/**
 * The page's policy: its own scripts, styles and fetches only: no inline script, no other origin,
 * no framing. uPlot and Preact set styles through the DOM's style properties, which CSP allows.
 */
export const CONTENT_SECURITY_POLICY = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/** Headers every console answer carries, pages and JSON alike. */
export const CONSOLE_HEADERS: Readonly<Record<string, string>> = {
  'Content-Security-Policy': CONTENT_SECURITY_POLICY,
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'no-referrer',
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Resource-Policy': 'same-origin',
};

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.html': 'text/html; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.map': 'application/json',
};

export interface ConsoleAsset {
  body: Buffer;
  type: string;
}

/**
 * The built console (`npm run build` writes it to dist/console), read once into memory: only files
 * that exist at start-up can be served, so no request path reaches the file system. The page is
 * never cached (it names the current bundle); bundles are named by their content hash, so they are
 * cached for good.
 */
export class ConsoleAssets {
  readonly page: ConsoleAsset | undefined;
  private readonly assets = new Map<string, ConsoleAsset>();

  constructor(dir: string) {
    const page = join(dir, 'index.html');
    this.page = existsSync(page) ? { body: readFileSync(page), type: TYPES['.html']! } : undefined;
    const assets = join(dir, 'assets');
    if (!existsSync(assets)) return;
    for (const name of readdirSync(assets)) {
      const type = TYPES[extname(name)];
      if (type) this.assets.set(name, { body: readFileSync(join(assets, name)), type });
    }
  }

  asset(name: string): ConsoleAsset | undefined {
    return this.assets.get(name);
  }
}

export const PAGE_CACHE = 'no-store';
export const ASSET_CACHE = 'public, max-age=31536000, immutable';
