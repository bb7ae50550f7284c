import { defineProject } from 'vitest/config';

export default defineProject({
  resolve: { conditions: ['@cyclone/source'] },
  test: {
    name: 'core',
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
