/**
 * A primary and a synchronous streaming standby, built from PostgreSQL's own server binaries
 * (`initdb`, `pg_ctl`, `pg_basebackup`: Debian's postgresql-NN package) in a temporary directory,
 * each on a port of its own, never the shared server at 5432. Clients reach the primary through
 * a `SwitchProxy` (switch-proxy.ts): one address that moves to the new primary at a failover.
 *
 * Replication: `wal_level = replica`, the standby streams from the primary (`primary_conninfo`
 * with `application_name` = the node's name) and is named in the primary's
 * `synchronous_standby_names`, with `synchronous_commit = on` (or the option's value): a COMMIT
 * returns only once the standby has flushed its WAL (PostgreSQL 15 docs, § 27.2.8 Synchronous
 * Replication).
 *
 * Failover (`failover()`), the way an HA manager (Patroni, pg_auto_failover) does it:
 * 1. the primary dies: every process of it SIGKILLed at once (a crash, no shutdown checkpoint);
 *    the proxy resets what is left of its sessions and refuses new ones;
 * 2. after a detection delay, the standby is promoted (`pg_ctl promote`);
 * 3. the proxy points at it. The old primary is fenced for good: dead, and its data directory
 *    is never started again (a rejoin would need `pg_rewind`), so there is no split brain.
 *
 * The promoted node runs without a synchronous standby (`synchronous_standby_names` empty, as
 * Patroni's non-strict synchronous mode does) until `addStandby()` gives it one again: a second
 * failover before that could lose acknowledged commits, so callers wait for `addStandby()`.
 *
 * As root the servers run as the `postgres` OS user (`runuser`), which initdb requires.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { chmod, chown, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { ExitTracked } from './exit-hooks.js';
import { SwitchProxy } from './switch-proxy.js';

/** The `synchronous_commit` levels that wait for the standby. */
export type SynchronousCommit = 'on' | 'remote_apply' | 'remote_write';

export interface ReplicatedClusterOptions {
  /** Where initdb, pg_ctl and pg_basebackup are. Default: `postgresBinDir()`. */
  binDir?: string;
  /** Default `on` (the standby has flushed the WAL before a COMMIT returns). */
  synchronousCommit?: SynchronousCommit;
  /** Extra server settings for every node (postgresql.conf lines). */
  settings?: Record<string, string | number>;
  /** Progress lines (default: none). */
  log?: (line: string) => void;
}

/** One server of the pair. */
export interface PgNode {
  /** `node1`, `node2`…: also its `application_name` while it is a standby. */
  readonly name: string;
  readonly port: number;
  readonly dataDir: string;
  /** The server's log (pg_ctl -l). */
  readonly logFile: string;
  role: 'primary' | 'standby' | 'dead';
}

/** When each phase of a failover happened (epoch ms) and how long clients had no primary. */
export interface FailoverTimes {
  killedAt: number;
  promotedAt: number;
  switchedAt: number;
  /** `switchedAt - killedAt`. */
  downMs: number;
  /** Name of the new primary. */
  primary: string;
}

const REQUIRED = ['initdb', 'pg_ctl', 'pg_basebackup', 'postgres'] as const;

/**
 * The directory of PostgreSQL's server binaries: `CYCLONE_PG_BINDIR`, else the newest
 * `/usr/lib/postgresql/<version>/bin` (Debian's layout) holding initdb, pg_ctl, pg_basebackup and
 * postgres.
 * @returns the directory, or why there is none (for a test to report as skipped).
 */
export function postgresBinDir(): { binDir: string } | { reason: string } {
  const fromEnv = process.env.CYCLONE_PG_BINDIR;
  const candidates: string[] = [];
  if (fromEnv) candidates.push(fromEnv);
  else if (existsSync('/usr/lib/postgresql')) {
    const versions = readdirSync('/usr/lib/postgresql')
      .filter((v) => /^\d+$/.test(v))
      .sort((a, b) => Number(b) - Number(a));
    candidates.push(...versions.map((v) => `/usr/lib/postgresql/${v}/bin`));
  }
  for (const dir of candidates) {
    if (REQUIRED.every((b) => existsSync(join(dir, b)))) {
      if (process.getuid?.() === 0 && !postgresUser()) {
        return { reason: 'running as root and there is no `postgres` OS user to run initdb as' };
      }
      return { binDir: dir };
    }
  }
  return {
    reason: `no PostgreSQL server binaries (${REQUIRED.join(', ')}) in ${
      candidates.join(', ') || '/usr/lib/postgresql/*/bin'
    }: install postgresql-15 or set CYCLONE_PG_BINDIR`,
  };
}

/** The uid and gid of the `postgres` OS user, from /etc/passwd. */
function postgresUser(): { uid: number; gid: number } | undefined {
  try {
    for (const line of readFileSync('/etc/passwd', 'utf8').split('\n')) {
      const f = line.split(':');
      if (f[0] === 'postgres') return { uid: Number(f[2]), gid: Number(f[3]) };
    }
  } catch {
    // no passwd file
  }
  return undefined;
}

/** Every cluster still running in this process, killed if the process exits without close(). */
const open = new ExitTracked<ReplicatedCluster>((c) => c.killEverything());

/** A primary, its synchronous standby and the proxy in front of them; see the module comment. */
export class ReplicatedCluster {
  private readonly nodes: PgNode[] = [];
  private seq = 0;
  private readonly asRoot = process.getuid?.() === 0;
  private readonly owner = postgresUser();
  private closed = false;

  private constructor(
    /** The temporary directory holding every node's data and log. */
    readonly baseDir: string,
    private readonly binDir: string,
    private readonly options: ReplicatedClusterOptions,
    /** The moving address: clients connect here. */
    readonly proxy: SwitchProxy,
  ) {}

  /**
   * Builds the pair: initdb and start of the primary, a base backup started as its synchronous
   * standby, the proxy pointing at the primary.
   * @throws when the binaries are missing (see `postgresBinDir`) or a server does not start
   *   (the message names its log); whatever was started is removed first.
   */
  static async start(options: ReplicatedClusterOptions = {}): Promise<ReplicatedCluster> {
    let binDir = options.binDir;
    if (!binDir) {
      const found = postgresBinDir();
      if ('reason' in found) throw new Error(found.reason);
      binDir = found.binDir;
    }
    const base = await mkdtemp(join(tmpdir(), 'cyclone-repl-'));
    await chmod(base, 0o755);
    const proxy = await SwitchProxy.start(undefined);
    const cluster = new ReplicatedCluster(base, binDir, options, proxy);
    open.add(cluster);
    try {
      if (cluster.asRoot && cluster.owner) {
        await chown(base, cluster.owner.uid, cluster.owner.gid);
      }
      const primary = await cluster.initPrimary();
      proxy.switchTo({ host: '127.0.0.1', port: primary.port });
      await cluster.addStandby();
      return cluster;
    } catch (err) {
      await cluster.close();
      throw err;
    }
  }

  /** The primary now (undefined between its death and the promotion). */
  get primary(): PgNode | undefined {
    return this.nodes.find((n) => n.role === 'primary');
  }

  /** The standby now, if any. */
  get standby(): PgNode | undefined {
    return this.nodes.find((n) => n.role === 'standby');
  }

  /** Every node ever started, dead ones included. */
  get allNodes(): readonly PgNode[] {
    return this.nodes;
  }

  /**
   * A connection string through the proxy (the moving address), user `postgres`, trust auth.
   * @param database default `postgres`
   * @param applicationName set as `application_name` when given
   */
  url(database = 'postgres', applicationName?: string): string {
    const u = new URL(`postgres://postgres@127.0.0.1:${this.proxy.port}/${database}`);
    if (applicationName) u.searchParams.set('application_name', applicationName);
    return u.toString();
  }

  /** A connection string straight to `node`, bypassing the proxy. */
  directUrl(node: PgNode, database = 'postgres'): string {
    return `postgres://postgres@127.0.0.1:${node.port}/${database}`;
  }

  /**
   * Makes a base backup of the primary into a new node, starts it as a standby streaming from
   * the primary, names it in the primary's `synchronous_standby_names` and waits until it is
   * the synchronous standby (`pg_stat_replication.sync_state = 'sync'`).
   * @throws when there is no primary, a standby already runs, or it is not in sync within 60 s.
   */
  async addStandby(): Promise<PgNode> {
    const primary = this.primary;
    if (!primary) throw new Error('no primary to make a standby of');
    if (this.standby) throw new Error(`${this.standby.name} is already the standby`);
    const node = await this.newNode('standby');
    await this.pg('pg_basebackup', [
      '-h',
      '127.0.0.1',
      '-p',
      String(primary.port),
      '-U',
      'postgres',
      '-D',
      node.dataDir,
      '-X',
      'stream',
      '-c',
      'fast',
      '--no-sync',
    ]);
    // The backup copied the primary's postgresql.auto.conf (its synchronous_standby_names):
    // the standby's is its own.
    await this.writeOwned(
      join(node.dataDir, 'postgresql.auto.conf'),
      `primary_conninfo = 'host=127.0.0.1 port=${primary.port} user=postgres application_name=${node.name}'\n` +
        `synchronous_standby_names = ''\n`,
    );
    await this.writeOwned(join(node.dataDir, 'standby.signal'), '');
    this.nodes.push(node);
    await this.startNode(node);
    await this.onNode(primary, async (c) => {
      await c.query(`ALTER SYSTEM SET synchronous_standby_names = '"${node.name}"'`);
      await c.query(
        `ALTER SYSTEM SET synchronous_commit = '${this.options.synchronousCommit ?? 'on'}'`,
      );
      await c.query('SELECT pg_reload_conf()');
    });
    await this.waitUntil(`${node.name} in sync with ${primary.name}`, 60_000, async () => {
      const { rows } = await this.onNode(primary, (c) =>
        c.query<{ sync_state: string; state: string }>(
          'SELECT sync_state, state FROM pg_stat_replication WHERE application_name = $1',
          [node.name],
        ),
      );
      return rows[0]?.sync_state === 'sync' && rows[0]?.state === 'streaming';
    });
    this.log(`${node.name} (port ${node.port}) is the synchronous standby of ${primary.name}`);
    return node;
  }

  /**
   * Turns synchronous replication off (`synchronous_standby_names` empty: COMMITs no longer wait
   * for the standby) or back on for the current standby; for tests that show what asynchronous
   * replication loses.
   * @throws when there is no primary, or no standby to turn it on for.
   */
  async setSynchronous(on: boolean): Promise<void> {
    const primary = this.primary;
    if (!primary) throw new Error('no primary');
    const standby = this.standby;
    if (on && !standby) throw new Error('no standby to replicate to synchronously');
    const names = on && standby ? `"${standby.name}"` : '';
    await this.onNode(primary, async (c) => {
      await c.query(`ALTER SYSTEM SET synchronous_standby_names = '${names}'`);
      await c.query('SELECT pg_reload_conf()');
    });
  }

  /**
   * Stops the primary's WAL sender to the standby (SIGSTOP): the standby receives nothing more,
   * as if the network to it were down, and falls behind (with synchronous replication on,
   * COMMITs wait). `killPrimary()` ends it with the rest.
   * @throws when there is no primary or no WAL sender.
   */
  async pauseReplication(): Promise<void> {
    const primary = this.primary;
    if (!primary) throw new Error('no primary');
    const { rows } = await this.onNode(primary, (c) =>
      c.query<{ pid: number }>('SELECT pid FROM pg_stat_replication'),
    );
    if (rows.length === 0) throw new Error(`${primary.name} has no WAL sender`);
    for (const r of rows) process.kill(r.pid, 'SIGSTOP');
  }

  /**
   * Kills every process of the primary at once (SIGKILL: a crash) and points the proxy at
   * nothing, resetting the sessions still open through it.
   * @returns when it was killed (epoch ms).
   * @throws when there is no primary.
   */
  async killPrimary(): Promise<number> {
    const primary = this.primary;
    if (!primary) throw new Error('no primary to kill');
    const pid = this.postmasterPid(primary);
    const at = Date.now();
    if (pid !== undefined) killTree(pid);
    primary.role = 'dead';
    this.proxy.switchTo(undefined);
    if (pid !== undefined) {
      await this.waitUntil(`${primary.name} (pid ${pid}) gone`, 30_000, () => !alive(pid));
    }
    this.log(`${primary.name} killed`);
    return at;
  }

  /**
   * Promotes the standby (`pg_ctl promote`, waiting until it accepts writes) and points the
   * proxy at it, resetting any session still open.
   * @returns when the promotion completed (epoch ms).
   * @throws when there is no standby, or a primary still runs (kill it first: no split brain).
   */
  async promote(): Promise<{ promotedAt: number; switchedAt: number; node: PgNode }> {
    const standby = this.standby;
    if (!standby) throw new Error('no standby to promote');
    if (this.primary) throw new Error(`${this.primary.name} still runs: kill it before promoting`);
    await this.pg('pg_ctl', ['promote', '-w', '-t', '60', '-D', standby.dataDir]);
    await this.waitUntil(`${standby.name} out of recovery`, 30_000, async () => {
      const { rows } = await this.onNode(standby, (c) =>
        c.query<{ primary: boolean }>('SELECT NOT pg_is_in_recovery() AS primary'),
      );
      return rows[0]?.primary === true;
    });
    const promotedAt = Date.now();
    standby.role = 'primary';
    this.proxy.switchTo({ host: '127.0.0.1', port: standby.port });
    const switchedAt = Date.now();
    this.log(`${standby.name} promoted; the proxy points at it`);
    return { promotedAt, switchedAt, node: standby };
  }

  /**
   * A whole failover: `killPrimary()`, `detectionMs` (what an HA manager takes to declare the
   * primary dead; default 1 s), `promote()`.
   */
  async failover(options: { detectionMs?: number } = {}): Promise<FailoverTimes> {
    const killedAt = await this.killPrimary();
    const wait = killedAt + (options.detectionMs ?? 1_000) - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const { promotedAt, switchedAt, node } = await this.promote();
    return { killedAt, promotedAt, switchedAt, downMs: switchedAt - killedAt, primary: node.name };
  }

  /**
   * Stops the primary (`fast`: sessions ended, checkpoint; `immediate`: no checkpoint, crash
   * recovery at the start), waits `downMs`, starts it again on its port. The standby
   * reconnects by itself; until it has, COMMITs wait for it.
   * @returns how long the primary was down (ms).
   * @throws when there is no primary.
   */
  async restartPrimary(mode: 'fast' | 'immediate', downMs: number): Promise<number> {
    const primary = this.primary;
    if (!primary) throw new Error('no primary to restart');
    const down = Date.now();
    await this.pg('pg_ctl', ['stop', '-w', '-t', '60', '-m', mode, '-D', primary.dataDir]);
    if (downMs > 0) await new Promise((r) => setTimeout(r, downMs));
    await this.startNode(primary);
    return Date.now() - down;
  }

  /**
   * Stops every server (immediate), closes the proxy and removes the directory (kept with
   * `keepFiles`).
   */
  async close(options: { keepFiles?: boolean } = {}): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    open.delete(this);
    await this.proxy.close().catch(() => {});
    this.killEverything();
    for (const n of this.nodes) {
      const pid = this.postmasterPid(n);
      if (pid !== undefined) {
        await this.waitUntil(`${n.name} stopped`, 10_000, () => !alive(pid)).catch(() => {});
      }
    }
    if (!options.keepFiles)
      await rm(this.baseDir, { recursive: true, force: true }).catch(() => {});
  }

  /** SIGKILLs every server of this cluster, synchronously (the last resort at exit). */
  killEverything(): void {
    for (const n of this.nodes) {
      const pid = this.postmasterPid(n);
      if (pid !== undefined) killTree(pid);
      n.role = 'dead';
    }
  }

  private async initPrimary(): Promise<PgNode> {
    const node = await this.newNode('primary');
    await this.pg('initdb', [
      '-D',
      node.dataDir,
      '-U',
      'postgres',
      '--auth=trust',
      '--encoding=UTF8',
      '--locale=C',
      '--no-sync',
    ]);
    const settings: Record<string, string | number> = {
      listen_addresses: "'127.0.0.1'",
      wal_level: 'replica',
      max_wal_senders: 10,
      wal_keep_size: "'1GB'",
      hot_standby: 'on',
      // A standby whose primary restarted reconnects within this (default 5 s).
      wal_retrieve_retry_interval: "'500ms'",
      max_connections: 200,
      shared_buffers: "'64MB'",
      synchronous_commit: `'${this.options.synchronousCommit ?? 'on'}'`,
      log_line_prefix: "'%m [%p] %a '",
      ...this.options.settings,
    };
    const conf = Object.entries(settings)
      .map(([k, v]) => `${k} = ${v}`)
      .join('\n');
    const file = join(node.dataDir, 'postgresql.conf');
    await writeFile(file, `${await readFile(file, 'utf8')}\n# cyclone test cluster\n${conf}\n`);
    this.nodes.push(node);
    await this.startNode(node);
    this.log(`${node.name} (port ${node.port}) is the primary`);
    return node;
  }

  private async newNode(role: 'primary' | 'standby'): Promise<PgNode> {
    const name = `node${++this.seq}`;
    return {
      name,
      port: await freePort(),
      dataDir: join(this.baseDir, name),
      logFile: join(this.baseDir, `${name}.log`),
      role,
    };
  }

  private async startNode(node: PgNode): Promise<void> {
    try {
      // Port and socket directory on the command line: the base backup copies postgresql.conf.
      await this.pg('pg_ctl', [
        'start',
        '-w',
        '-t',
        '60',
        '-D',
        node.dataDir,
        '-l',
        node.logFile,
        '-o',
        `-p ${node.port} -k ${this.baseDir}`,
      ]);
    } catch (err) {
      const log = await readFile(node.logFile, 'utf8').catch(() => '');
      throw new Error(`${node.name} did not start: ${(err as Error).message}\n${log.slice(-2000)}`);
    }
  }

  /** Runs one of the binaries (as the `postgres` user when root). */
  private pg(bin: string, args: string[]): Promise<string> {
    const file = join(this.binDir, bin);
    const [cmd, argv] = this.asRoot
      ? ['runuser', ['-u', 'postgres', '--', file, ...args]]
      : [file, args];
    return new Promise((resolve, reject) => {
      execFile(
        cmd,
        argv,
        { cwd: this.baseDir, env: { PATH: process.env.PATH ?? '/usr/bin:/bin', LC_ALL: 'C' } },
        (err, stdout, stderr) => {
          if (err) reject(new Error(`${bin} ${args.join(' ')}: ${err.message}\n${stderr}`));
          else resolve(stdout);
        },
      );
    });
  }

  private async writeOwned(file: string, text: string): Promise<void> {
    await writeFile(file, text, { mode: 0o600 });
    if (this.asRoot && this.owner) await chown(file, this.owner.uid, this.owner.gid);
  }

  private async onNode<T>(node: PgNode, fn: (c: pg.Client) => Promise<T>): Promise<T> {
    const c = new pg.Client({
      connectionString: this.directUrl(node),
      connectionTimeoutMillis: 5_000,
    });
    c.on('error', () => {});
    await c.connect();
    try {
      return await fn(c);
    } finally {
      await c.end().catch(() => {});
    }
  }

  private postmasterPid(node: PgNode): number | undefined {
    try {
      const pid = Number(readFileSync(join(node.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
      return Number.isInteger(pid) && pid > 0 && alive(pid) ? pid : undefined;
    } catch {
      return undefined;
    }
  }

  private async waitUntil(
    what: string,
    timeoutMs: number,
    check: () => boolean | Promise<boolean>,
  ): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let last: unknown;
    for (;;) {
      try {
        if (await check()) return;
      } catch (err) {
        last = err;
      }
      if (Date.now() > deadline) {
        throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (${String(last)})`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  private log(line: string): void {
    this.options.log?.(`replication: ${line}`);
  }
}

/** True while `pid` runs (a zombie counts as gone). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The state follows the command name in parentheses.
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** SIGKILLs `pid` and its children (a postmaster's backends) in one go, without waiting. */
function killTree(pid: number): void {
  const victims = [pid];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) victims.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  for (const v of victims) {
    try {
      process.kill(v, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => resolve(typeof addr === 'object' && addr ? addr.port : 0));
    });
  });
}
