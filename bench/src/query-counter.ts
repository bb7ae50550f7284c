/**
 * Client-side statement counts (pg_stat_statements is not loaded on this server, and loading it
 * needs a restart): every `query()` of every `pg.Client` in the process is counted and timed,
 * keyed by its SQL text. Every system under test talks to PostgreSQL through `pg`, so this
 * counts their round trips the same way. Statements tagged `/* bench:monitor *\/` (the harness's
 * own completion checks) are not counted.
 */
import { createRequire } from 'node:module';

export interface StatementStat {
  /** Whitespace-collapsed SQL text, cut at 110 characters. */
  sql: string;
  calls: number;
  /** Sum of client-side durations (send → result), ms. */
  ms: number;
}

const stats = new Map<string, StatementStat>();
/** Raw SQL text → its entry: the whitespace regex runs once per distinct text. */
const byRaw = new Map<string, StatementStat>();
let enabled = false;
let total = 0;

/** Starts counting (from zero). */
export function startCounting(): void {
  stats.clear();
  byRaw.clear();
  total = 0;
  enabled = true;
}

/** Stops counting and returns the totals, busiest statements first. */
export function stopCounting(): { total: number; statements: StatementStat[] } {
  enabled = false;
  return { total, statements: [...stats.values()].sort((a, b) => b.calls - a.calls) };
}

function record(text: string, ms: number): void {
  total++;
  let s = byRaw.get(text);
  if (!s) {
    const key = text.replace(/\s+/g, ' ').trim().slice(0, 110);
    s = stats.get(key);
    if (!s) {
      s = { sql: key, calls: 0, ms: 0 };
      stats.set(key, s);
    }
    byRaw.set(text, s);
  }
  s.calls++;
  s.ms += ms;
}

type QueryFn = (this: unknown, ...args: unknown[]) => unknown;
const patched = new WeakSet<object>();

/**
 * Patches `Client.prototype.query` of the `pg` module that each of `fromModules` resolves
 * (pnpm may give packages distinct copies; here they share one, but each is patched once).
 */
export function installQueryCounter(fromModules: readonly string[]): void {
  const here = createRequire(import.meta.url);
  for (const name of fromModules) {
    let pgModule: { Client: { prototype: { query: QueryFn } } };
    try {
      pgModule = createRequire(here.resolve(name))('pg');
    } catch {
      continue;
    }
    const proto = pgModule.Client.prototype;
    if (patched.has(proto)) continue;
    patched.add(proto);
    const original = proto.query;
    proto.query = function (this: unknown, ...args: unknown[]) {
      const [config, values, callback] = args;
      if (!enabled) return original.apply(this, args);
      // A prepared statement is counted by its name too: two statements may share their first
      // 110 characters (the claim and the next-due read both open with the priorities' scan).
      const named = config as { text?: string; name?: string } | null;
      const text =
        typeof config === 'string'
          ? config
          : `${named?.name ? `[${named.name}] ` : ''}${String(named?.text ?? '?')}`;
      if (text.startsWith('/* bench:monitor */')) return original.apply(this, args);
      const start = performance.now();
      const done = () => record(text, performance.now() - start);
      if (typeof values === 'function') {
        const cb = values as (e: unknown, r: unknown) => void;
        return original.call(this, config, (e: unknown, r: unknown) => {
          done();
          cb(e, r);
        });
      }
      if (typeof callback === 'function') {
        const cb = callback as (e: unknown, r: unknown) => void;
        return original.call(this, config, values, (e: unknown, r: unknown) => {
          done();
          cb(e, r);
        });
      }
      const result = original.apply(this, args);
      if (result && typeof (result as Promise<unknown>).then === 'function') {
        (result as Promise<unknown>).then(done, done);
      } else done();
      return result;
    };
  }
}
