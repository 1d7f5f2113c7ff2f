import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

/**
 * The console's bundle, built with the rest by `npm run build` into dist/console, where the API
 * serves it at /console. Everything it loads is in the bundle: nothing comes from a CDN at run time.
 */
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/console/',
  logLevel: 'warn',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: fileURLToPath(new URL('../../dist/console', import.meta.url)),
    emptyOutDir: true,
    assetsDir: 'assets',
    // The page's CSP forbids inline scripts and data: scripts: every script is a file of its own.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    reportCompressedSize: false,
  },
});
