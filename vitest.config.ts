import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    projects: [
      'packages/*/vitest.config.ts',
      // The adapters' tests again at the lowest SDK version of their peer range.
      'packages/*/vitest.lowest-sdk.config.ts',
      // Chosen tests again with the engine behind PgBouncer in transaction pooling mode.
      'packages/*/vitest.pgbouncer.config.ts',
      'apps/*/vitest.config.ts',
      'tools/*/vitest.config.ts',
    ],
  },
});
