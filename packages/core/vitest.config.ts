import { defineProject } from 'vitest/config';

export default defineProject({
  // Run workspace packages from source (CONVENTIONS.md); vitest 4 resolves Node-side imports
  // through the SSR settings.
  resolve: { conditions: ['@cyclone/source'] },
  ssr: { resolve: { conditions: ['@cyclone/source'] } },
  test: {
    name: 'core',
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
