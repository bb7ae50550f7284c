/**
 * PgBouncer for the tests: a real `pgbouncer` (Debian's package) as a child process of the test,
 * in transaction pooling mode, in front of the test server (`DATABASE_URL`). Each one has a
 * config of its own in a temp dir and a port of its own; every database name is passed through
 * (`* =`), so a test file's own database is reached through it under the same name.
 *
 * PgBouncer refuses to run as root; as root (CI) it is started with `-u nobody`, and its config
 * is made readable to that user.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { ADMIN_URL } from './db.js';
import { onProcessExit } from './exit-hooks.js';

/** The executable tests start (`CYCLONE_PGBOUNCER`, else `pgbouncer` on the PATH or in /usr/sbin). */
const PGBOUNCER = process.env.CYCLONE_PGBOUNCER ?? 'pgbouncer';

/** The PATH a root shell has: Debian installs pgbouncer in /usr/sbin. */
const PATH = `${process.env.PATH ?? ''}:/usr/sbin:/usr/local/sbin`;

/**
 * `pgbouncer --version`'s first line (`PgBouncer 1.18.0`), or undefined when it cannot be run
 * (not installed: `apt-get install -y pgbouncer`).
 */
export function pgbouncerVersion(): string | undefined {
  try {
    const out = execFileSync(PGBOUNCER, ['--version'], {
      encoding: 'utf8',
      env: { ...process.env, PATH },
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    return out.split('\n')[0]?.trim() || undefined;
  } catch {
    return undefined;
  }
}

/** Options of `startPgBouncer`. */
export interface PgBouncerOptions {
  /** The server it pools for (host, port, user and password from it). Default `ADMIN_URL`. */
  serverUrl?: string;
  /** Server connections per database and user (`default_pool_size`). Default 20. */
  poolSize?: number;
  /** Extra `[pgbouncer]` settings, `key = value` each. */
  settings?: Record<string, string | number>;
}

/** A running PgBouncer; see the module comment. */
export interface PgBouncer {
  /** `pgbouncer --version`'s first line. */
  readonly version: string;
  readonly host: string;
  readonly port: number;
  /** The process's pid while it runs, else undefined. */
  readonly pid: number | undefined;
  /** `url` (a direct server URL) with its host and port replaced by PgBouncer's. */
  url(url: string): string;
  /** The admin console's URL (database `pgbouncer`). */
  readonly adminUrl: string;
  /**
   * Runs one admin console command (`SHOW POOLS`, `PAUSE`, `RESUME`, `RECONNECT`…) on a
   * connection of its own, and returns its rows.
   */
  admin(command: string): Promise<Record<string, unknown>[]>;
  /** Sends `signal` (default SIGKILL) and waits for the process to exit. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Kills it (SIGKILL) if it runs and starts it again on the same port and config; waits until it accepts. */
  restart(): Promise<void>;
  /** What it wrote to stderr (its log), for a failure message. */
  log(): string;
  /** Stops it (SIGTERM, SIGKILL after 5 s) and removes its temp dir. */
  stop(): Promise<void>;
}

/** A free TCP port on 127.0.0.1, from the kernel. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const addr = s.address();
      s.close(() => (addr && typeof addr === 'object' ? resolve(addr.port) : reject(new Error())));
    });
  });
}

/**
 * Starts PgBouncer (transaction pooling, `auth_type = any`: every client logs in as the server
 * URL's user; the console accepts anyone) and waits until its console answers.
 * @throws when pgbouncer is not installed, or does not come up within 15 s (its log attached).
 */
export async function startPgBouncer(options: PgBouncerOptions = {}): Promise<PgBouncer> {
  const version = pgbouncerVersion();
  if (!version) {
    throw new Error(`${PGBOUNCER} cannot be run: install it (apt-get install -y pgbouncer)`);
  }
  const server = new URL(options.serverUrl ?? ADMIN_URL);
  const host = '127.0.0.1';
  const dir = mkdtempSync(join(tmpdir(), 'cyclone-pgbouncer-'));
  const asRoot = process.getuid?.() === 0;
  // The unprivileged user it switches to must read its config.
  if (asRoot) chmodSync(dir, 0o755);
  const ini = join(dir, 'pgbouncer.ini');
  let port = 0;
  let proc: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  let stderr = '';

  const writeConfig = () => {
    const settings: Record<string, string | number> = {
      listen_addr: host,
      listen_port: port,
      // No unix socket: the temp dir is not writable by the unprivileged user.
      unix_socket_dir: '',
      auth_type: 'any',
      // The console's commands (PAUSE, RECONNECT…) for user pgbouncer; SHOW for anyone.
      admin_users: 'pgbouncer',
      pool_mode: 'transaction',
      max_client_conn: 2000,
      default_pool_size: options.poolSize ?? 20,
      // pg sends none of these, other drivers do; PgBouncer refuses unknown startup parameters.
      ignore_startup_parameters: 'extra_float_digits',
      logfile: '',
      pidfile: '',
      log_connections: 0,
      log_disconnections: 0,
      // After a failed server login (the server restarting), try again within a second, not 15.
      server_login_retry: 1,
      ...options.settings,
    };
    const user = decodeURIComponent(server.username) || 'postgres';
    const password = decodeURIComponent(server.password);
    // Quoted, a quote doubled (PgBouncer's connect-string syntax).
    const quote = (v: string) => `'${v.replaceAll("'", "''")}'`;
    const target = [
      `host=${server.hostname}`,
      `port=${server.port || '5432'}`,
      `user=${quote(user)}`,
      ...(password ? [`password=${quote(password)}`] : []),
    ].join(' ');
    const text = [
      '[databases]',
      `* = ${target}`,
      '',
      '[pgbouncer]',
      ...Object.entries(settings).map(([k, v]) => `${k} = ${v}`),
      '',
    ].join('\n');
    writeFileSync(ini, text, { mode: 0o644 });
  };

  const admin = async (command: string) => {
    const c = new pg.Client({ host, port, database: 'pgbouncer', user: 'pgbouncer' });
    c.on('error', () => {});
    await c.connect();
    try {
      return (await c.query(command)).rows as Record<string, unknown>[];
    } finally {
      await c.end().catch(() => {});
    }
  };

  const launch = async () => {
    const args = asRoot ? ['-u', 'nobody', ini] : [ini];
    const p = spawn(PGBOUNCER, args, {
      env: { ...process.env, PATH },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    proc = p;
    // PgBouncer does not watch its parent: a test process that ends without stop() takes it along.
    const removeExitHook = onProcessExit(() => {
      p.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    });
    p.once('exit', removeExitHook);
    p.stderr?.setEncoding('utf8');
    p.stderr?.on('data', (d: string) => {
      stderr = (stderr + d).slice(-20_000);
    });
    exited = new Promise((resolve) => {
      p.once('exit', () => resolve());
      p.once('error', () => resolve());
    });
    const deadline = Date.now() + 15_000;
    for (;;) {
      if (p.exitCode !== null || p.signalCode !== null) {
        throw new Error(`pgbouncer exited at start (${p.exitCode ?? p.signalCode}):\n${stderr}`);
      }
      try {
        await admin('SHOW VERSION');
        return;
      } catch (err) {
        if (Date.now() > deadline) {
          p.kill('SIGKILL');
          throw new Error(`pgbouncer did not answer within 15 s (${String(err)}):\n${stderr}`);
        }
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  const kill = async (signal: NodeJS.Signals = 'SIGKILL') => {
    if (proc && proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
    await exited;
    proc = undefined;
  };

  // A port from the kernel may be taken again before pgbouncer binds it: try a few.
  for (let tries = 1; ; tries++) {
    port = await freePort();
    writeConfig();
    try {
      await launch();
      break;
    } catch (err) {
      await kill();
      if (tries >= 3) {
        rmSync(dir, { recursive: true, force: true });
        throw err;
      }
    }
  }

  const bouncer: PgBouncer = {
    version,
    host,
    port,
    get pid() {
      return proc?.pid;
    },
    url(url: string) {
      const u = new URL(url);
      u.hostname = host;
      u.port = String(port);
      return u.toString();
    },
    adminUrl: `postgres://pgbouncer@${host}:${port}/pgbouncer`,
    admin,
    kill,
    async restart() {
      await kill();
      await launch();
    },
    log: () => stderr,
    async stop() {
      if (proc && proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGTERM');
        const t = setTimeout(() => proc?.kill('SIGKILL'), 5_000);
        await exited;
        clearTimeout(t);
      }
      proc = undefined;
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return bouncer;
}
