/**
 * A throwaway PostgreSQL server of a test's own: `initdb` in a temporary directory, started with
 * `pg_ctl` on a free port and the listen addresses the test names (say, the address of a bridge
 * its network namespaces reach: netns.ts), trust authentication for loopback and the subnets it
 * names. Never the shared server at 5432, whose settings must not change. Stopped (immediate
 * shutdown) and removed by `stop()`, or by a process `exit` hook when a test dies without it.
 *
 * It uses Debian's server binaries (`/usr/lib/postgresql/<version>/bin`, or `CYCLONE_PG_BINDIR`);
 * as root the server runs as the `postgres` OS user (`runuser`), since initdb refuses root.
 * Durability is off (`fsync`, `full_page_writes`): the server lives as long as its test.
 */
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { appendFile, chmod, chown, mkdtemp } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ExitTracked } from './exit-hooks.js';

const run = promisify(execFile);
const NEEDED = ['initdb', 'pg_ctl', 'postgres'] as const;

/**
 * The directory of PostgreSQL's server binaries, or why there is none (for a test to report
 * itself skipped): `CYCLONE_PG_BINDIR`, else the newest `/usr/lib/postgresql/<version>/bin`.
 */
export function serverBinDir(): { binDir: string } | { reason: string } {
  const dirs = process.env.CYCLONE_PG_BINDIR
    ? [process.env.CYCLONE_PG_BINDIR]
    : existsSync('/usr/lib/postgresql')
      ? readdirSync('/usr/lib/postgresql')
          .filter((v) => /^\d+$/.test(v))
          .sort((a, b) => Number(b) - Number(a))
          .map((v) => `/usr/lib/postgresql/${v}/bin`)
      : [];
  const found = dirs.find((d) => NEEDED.every((b) => existsSync(join(d, b))));
  if (!found) {
    return {
      reason: `no PostgreSQL server binaries (${NEEDED.join(', ')}) in ${dirs.join(', ') || '/usr/lib/postgresql/*/bin'}: install postgresql-15 or set CYCLONE_PG_BINDIR`,
    };
  }
  if (process.getuid?.() === 0 && !osUser('postgres')) {
    return { reason: 'running as root and there is no `postgres` OS user to run initdb as' };
  }
  return { binDir: found };
}

/** Options of `PgServer.start`. */
export interface PgServerOptions {
  /** Addresses to listen on besides 127.0.0.1. */
  listen?: string[];
  /** Subnets (CIDR) whose clients are trusted besides loopback. */
  trust?: string[];
  /** More postgresql.conf settings. */
  settings?: Record<string, string | number>;
}

const open = new ExitTracked<PgServer>((s) => s.stopSync());

/** A running throwaway server; see the module comment. */
export class PgServer {
  private stopped = false;

  private constructor(
    readonly baseDir: string,
    readonly port: number,
    private readonly binDir: string,
  ) {}

  /** The data directory. */
  get dataDir(): string {
    return join(this.baseDir, 'data');
  }

  /** The server's log file. */
  get logFile(): string {
    return join(this.baseDir, 'server.log');
  }

  /**
   * A connection string as the `postgres` user (trust) to `database` at `host` (default
   * 127.0.0.1; a listen address for clients in a namespace).
   */
  url(database = 'postgres', host = '127.0.0.1'): string {
    return `postgres://postgres@${host}:${this.port}/${database}`;
  }

  /**
   * initdb, configuration and start; resolves once the server accepts connections.
   * @throws when the binaries are missing (`serverBinDir`) or the server does not start (the
   *   message carries its log's tail); what was made is removed first.
   */
  static async start(options: PgServerOptions = {}): Promise<PgServer> {
    const bin = serverBinDir();
    if ('reason' in bin) throw new Error(bin.reason);
    const base = await mkdtemp(join(tmpdir(), 'cyclone-pg-'));
    await chmod(base, 0o755);
    const server = new PgServer(base, await freePort(), bin.binDir);
    open.add(server);
    try {
      const owner = process.getuid?.() === 0 ? osUser('postgres') : undefined;
      if (owner) await chown(base, owner.uid, owner.gid);
      await server.as(owner, 'initdb', [
        '-D',
        server.dataDir,
        '-U',
        'postgres',
        '--auth=trust',
        '--no-sync',
        '-E',
        'UTF8',
        '--locale=C',
      ]);
      const settings: Record<string, string | number> = {
        listen_addresses: `'${['127.0.0.1', ...(options.listen ?? [])].join(',')}'`,
        port: server.port,
        unix_socket_directories: `'${base}'`,
        fsync: 'off',
        full_page_writes: 'off',
        synchronous_commit: 'off',
        max_connections: 200,
        shared_buffers: "'32MB'",
        ...options.settings,
      };
      await appendFile(
        join(server.dataDir, 'postgresql.conf'),
        `${Object.entries(settings)
          .map(([k, v]) => `${k} = ${v}`)
          .join('\n')}\n`,
      );
      await appendFile(
        join(server.dataDir, 'pg_hba.conf'),
        (options.trust ?? []).map((cidr) => `host all all ${cidr} trust\n`).join(''),
      );
      await server.as(owner, 'pg_ctl', ['-D', server.dataDir, '-l', server.logFile, '-w', 'start']);
      return server;
    } catch (err) {
      const log = existsSync(server.logFile)
        ? readFileSync(server.logFile, 'utf8').slice(-2000)
        : '';
      server.stopSync();
      throw new Error(`the test's PostgreSQL did not start: ${String(err)}\n${log}`);
    }
  }

  /** Stops the server at once (immediate shutdown) and removes its directory. */
  async stop(): Promise<void> {
    this.stopSync();
  }

  /** `stop()` for an exit hook: synchronous, errors ignored. */
  stopSync(): void {
    if (this.stopped) return;
    this.stopped = true;
    open.delete(this);
    if (existsSync(join(this.dataDir, 'postmaster.pid'))) {
      const owner = process.getuid?.() === 0 ? osUser('postgres') : undefined;
      const [cmd, args] = this.command(owner, 'pg_ctl', [
        '-D',
        this.dataDir,
        '-m',
        'immediate',
        'stop',
      ]);
      try {
        execFileSync(cmd, args, { stdio: 'pipe', timeout: 30_000 });
      } catch {
        // not running
      }
    }
    rmSync(this.baseDir, { recursive: true, force: true });
  }

  private async as(
    owner: { uid: number; gid: number } | undefined,
    tool: string,
    args: string[],
  ): Promise<void> {
    const [cmd, full] = this.command(owner, tool, args);
    await run(cmd, full, { timeout: 120_000 });
  }

  private command(
    owner: { uid: number; gid: number } | undefined,
    tool: string,
    args: string[],
  ): [string, string[]] {
    const path = join(this.binDir, tool);
    return owner ? ['runuser', ['-u', 'postgres', '--', path, ...args]] : [path, args];
  }
}

/** The uid and gid of OS user `name`, from /etc/passwd. */
function osUser(name: string): { uid: number; gid: number } | undefined {
  try {
    for (const line of readFileSync('/etc/passwd', 'utf8').split('\n')) {
      const f = line.split(':');
      if (f[0] === name) return { uid: Number(f[2]), gid: Number(f[3]) };
    }
  } catch {
    // no passwd file
  }
  return undefined;
}

/** A TCP port free on 127.0.0.1 right now. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => (a && typeof a === 'object' ? resolve(a.port) : reject(new Error('no port'))));
    });
  });
}
