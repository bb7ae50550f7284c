/**
 * The vitest project config every package shares (packages/<pkg>/vitest.config.ts):
 *
 *   export default cycloneProject('stripe', { env: { … } });
 *
 * Tests run from source: the `@cyclone/source` export condition makes the workspace packages
 * (`@cyclone/core`, `@cyclone/testkit`…) resolve to their src/, never to a possibly stale or
 * missing dist/. Vitest 4 resolves in several Vite environments, and each needs the condition:
 * `resolve` sets it for the client one, `ssr.resolve` for the one test files run in, and
 * `sourceConditionEverywhere` for the others (vitest's own, which imports the global setups,
 * inherits neither).
 */
import { fileURLToPath } from 'node:url';
import { defaultServerConditions, type Plugin } from 'vite';
import { defineProject, type UserWorkspaceConfig } from 'vitest/config';

const SOURCE = '@cyclone/source';
const conditions = [SOURCE];

/** Test options a package may set or override (its `name` is the first argument). */
export type ProjectTestOptions = Omit<NonNullable<UserWorkspaceConfig['test']>, 'name'>;

/**
 * The project `name`: test/**\/*.test.ts, test/support/global-setup.ts (the package's migrated
 * template database), a process per test file, 30 s test and hook timeouts, `CYCLONE_LOG=silent`;
 * `test` adds to or overrides these (its `env` is merged).
 */
export function cycloneProject(name: string, test: ProjectTestOptions = {}): UserWorkspaceConfig {
  return defineProject({
    resolve: { conditions },
    ssr: { resolve: { conditions } },
    plugins: [sourceConditionEverywhere()],
    test: {
      name,
      include: ['test/**/*.test.ts'],
      globalSetup: ['test/support/global-setup.ts'],
      pool: 'forks',
      testTimeout: 30_000,
      hookTimeout: 30_000,
      ...test,
      // Cyclone's default logger writes failures to stderr; tests that fail steps on purpose
      // would flood the output (their child processes inherit it too).
      env: { CYCLONE_LOG: 'silent', ...test.env },
    },
  });
}

/** Puts `@cyclone/source` first in the conditions of every Vite environment that lacks it. */
function sourceConditionEverywhere(): Plugin {
  return {
    name: 'cyclone:source-condition',
    configEnvironment(_name, env) {
      // Unset: the environment would get Vite's defaults for a server consumer; keep them.
      const current = env.resolve?.conditions ?? defaultServerConditions;
      if (current.includes(SOURCE)) return;
      env.resolve = { ...env.resolve, conditions: [SOURCE, ...current] };
    },
  };
}

/**
 * An adapter's second project: its tests again, with each provider SDK of `sdks` at the lowest
 * version of the adapter's peer range. That version is a devDependency under an npm alias
 * (`"stripe-lowest": "npm:stripe@17.0.0"`, mapped as `{ stripe: 'stripe-lowest' }`); the alias
 * replaces the SDK's name, subpaths included, in the test files and the sources (vite's
 * `resolve.alias`) and in the worker processes the crash tests spawn (`CYCLONE_TEST_ALIASES`,
 * read by @cyclone/testkit's spawnWorker). The project is named `<name>@lowest-sdk`.
 */
export function lowestSdkProject(
  name: string,
  sdks: Record<string, string>,
  test: ProjectTestOptions = {},
): UserWorkspaceConfig {
  const base = cycloneProject(`${name}@lowest-sdk`, {
    ...test,
    env: { ...test.env, CYCLONE_TEST_ALIASES: JSON.stringify(sdks) },
  });
  const alias = Object.entries(sdks).map(([sdk, to]) => ({
    find: new RegExp(`^${sdk.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}(?=/|$)`),
    replacement: to,
  }));
  return { ...base, resolve: { ...base.resolve, alias } };
}

/** The setup file that starts a PgBouncer for each test file of a `@pgbouncer` project. */
const PGBOUNCER_SETUP = fileURLToPath(
  new URL('./tools/testkit/src/pgbouncer-setup.ts', import.meta.url),
);

/**
 * A package's third project: the test files `include` again with the engine behind PgBouncer
 * (Debian's package, transaction pooling), each file with a PgBouncer of its own
 * (tools/testkit/src/pgbouncer-setup.ts) and `CYCLONE_TEST_VIA=pgbouncer`, so that the tests'
 * `engineUrl()`, `engineClientOptions` and `engineWorkerOptions` (@cyclone/testkit) take the
 * way and the settings docs/operations.md gives for it. The project is named `<name>@pgbouncer`.
 */
export function pgbouncerProject(
  name: string,
  include: string[],
  test: ProjectTestOptions = {},
): UserWorkspaceConfig {
  return cycloneProject(`${name}@pgbouncer`, {
    ...test,
    include,
    setupFiles: [PGBOUNCER_SETUP, ...[test.setupFiles ?? []].flat()],
    env: { ...test.env, CYCLONE_TEST_VIA: 'pgbouncer' },
  });
}
