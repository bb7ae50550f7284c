/**
 * The harness's view of the server: fresh databases (cloned from a migrated template per
 * system), cumulative counters of a database (`pg_stat_database`), and the CPU time of the
 * server processes serving it (from /proc, this being the same machine).
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { sleep, urlFor } from './util.js';

/** Counters of one database. */
export interface DbCounters {
  commits: number;
  rollbacks: number;
  /** Rows inserted + updated + deleted. */
  rowsWritten: number;
}

/** Clock ticks per second of /proc/<pid>/stat (`getconf CLK_TCK`, 100 on Linux x86-64). */
const CLK_TCK = 100;

export class Admin {
  /** Prefix of every database this harness run creates. */
  readonly prefix = `bench_${randomBytes(3).toString('hex')}`;
  private readonly client: pg.Client;
  private readonly created = new Set<string>();
  private seq = 0;

  constructor(readonly baseUrl: string) {
    this.client = new pg.Client({ connectionString: baseUrl });
  }

  async connect(): Promise<void> {
    await this.client.connect();
  }

  url(db: string): string {
    return urlFor(this.baseUrl, db);
  }

  /** A new database (optionally cloned from `template`); returns its name. */
  async createDb(label: string, template?: string): Promise<string> {
    const name = `${this.prefix}_${label}_${++this.seq}`.replace(/[^a-z0-9_]/g, '_');
    await this.client.query(
      `CREATE DATABASE "${name}"${template ? ` TEMPLATE "${template}"` : ''}`,
    );
    this.created.add(name);
    return name;
  }

  async dropDb(name: string): Promise<void> {
    await this.client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    this.created.delete(name);
  }

  /** Drops every database this run created (also after a failure). */
  async dropAll(): Promise<void> {
    for (const name of [...this.created]) await this.dropDb(name).catch(() => {});
  }

  async close(): Promise<void> {
    await this.client.end();
  }

  async counters(db: string): Promise<DbCounters> {
    const { rows } = await this.client.query<{ c: string; r: string; w: string }>(
      `SELECT xact_commit AS c, xact_rollback AS r, tup_inserted + tup_updated + tup_deleted AS w
       FROM pg_stat_database WHERE datname = $1`,
      [db],
    );
    const row = rows[0];
    return {
      commits: Number(row?.c ?? 0),
      rollbacks: Number(row?.r ?? 0),
      rowsWritten: Number(row?.w ?? 0),
    };
  }

  /** CPU time (ms) used so far by each client backend connected to `db`, by pid. */
  async backendCpu(db: string): Promise<Map<number, number>> {
    const { rows } = await this.client.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'`,
      [db],
    );
    const out = new Map<number, number>();
    for (const { pid } of rows) {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        // Fields after the command name (which may contain spaces) start at field 3.
        const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        out.set(pid, ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK);
      } catch {
        // The backend exited meanwhile.
      }
    }
    return out;
  }

  /**
   * Waits until no backend is connected to `db` (a backend flushes its statistics when it
   * exits, so `counters` is exact after this).
   */
  async waitIdle(db: string, timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const { rows } = await this.client.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity
         WHERE datname = $1 AND backend_type = 'client backend'`,
        [db],
      );
      if ((rows[0]?.n ?? 0) === 0) {
        await sleep(50);
        return;
      }
      await sleep(20);
    }
  }

  /** Server version, connection limit, connections in use and whether pg_stat_statements is loaded. */
  async serverInfo(): Promise<{
    version: string;
    maxConnections: number;
    connections: number;
    pgStatStatements: boolean;
  }> {
    const { rows } = await this.client.query<{
      v: string;
      m: string;
      n: number;
      p: string;
    }>(
      `SELECT current_setting('server_version') AS v, current_setting('max_connections') AS m,
              (SELECT count(*)::int FROM pg_stat_activity WHERE backend_type = 'client backend') AS n,
              current_setting('shared_preload_libraries') AS p`,
    );
    const r = rows[0];
    return {
      version: r?.v ?? '?',
      maxConnections: Number(r?.m ?? 0),
      connections: r?.n ?? 0,
      pgStatStatements: (r?.p ?? '').includes('pg_stat_statements'),
    };
  }
}

/** Sums a `backendCpu` snapshot minus an earlier one (backends new since then count from 0). */
export function cpuDelta(before: Map<number, number>, after: Map<number, number>): number {
  let ms = 0;
  for (const [pid, v] of after) ms += v - (before.get(pid) ?? 0);
  return ms;
}
