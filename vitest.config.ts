import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: ['tests/unit/**/*.test.ts'],
          environment: 'node',
          // k6 modules exist only inside k6: stand-ins let the scenario scripts run under vitest.
          // `k6` last: it also matches every `k6/...` path.
          alias: {
            'k6/http': new URL('./tests/unit/k6/stubs/k6-http.ts', import.meta.url).pathname,
            'k6/metrics': new URL('./tests/unit/k6/stubs/k6-metrics.ts', import.meta.url).pathname,
            'k6/execution': new URL('./tests/unit/k6/stubs/k6-execution.ts', import.meta.url).pathname,
            k6: new URL('./tests/unit/k6/stubs/k6.ts', import.meta.url).pathname,
          },
        },
      },
      {
        test: {
          name: 'integration',
          include: ['tests/integration/**/*.test.ts'],
          environment: 'node',
          globalSetup: ['tests/integration/global-setup.ts'],
          // One broker, one Redis, one Postgres: files run one after another.
          fileParallelism: false,
          testTimeout: 120_000,
          hookTimeout: 180_000,
        },
      },
    ],
  },
});
