/**
 * `pnpm --filter @cyclone/example-crash-matrix start`: every row of Cyclone's crash matrix
 * (docs/design/ARCHITECTURE.md § The crash matrix), reproduced with real worker processes, each
 * printed as expected vs observed. Exit code 0 when every row holds, 1 otherwise.
 *
 * Database: DATABASE_URL, else the embedded PostgreSQL under `.cyclone/`. Cyclone's tables go
 * to their own schema, `crash_matrix`; what the handlers did to `crash_matrix_obs`.
 *
 * Options: `--rows 1,4` plays only those rows.
 */
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { Client } from '@cyclone/core';
import { resolveDatabaseUrl } from '@cyclone/core/embedded';
import pg from 'pg';
import { killAll } from './harness.js';
import { type Check, ROWS, type RowResult } from './rows.js';
import { ENGINE_SCHEMA, OBSERVATION_TABLES, OneStep, TwoSteps } from './workflows.js';

const say = (line = '') => process.stdout.write(`${line}\n`);

/** The matrix as the design states it: one line per row. */
const MATRIX = [
  'before the side effect → running until the lease expires; swept; run again (attempt + 1)',
  'after an external side effect, before the completion commit → run again; the (runId, node) key removes the duplicate; completionTx rolled back',
  'after the completion commit → completed; a terminal step never runs again',
  'never: alive but stalled, its lease expires → another worker runs it; the stalled completion is fenced out',
  'the handler throws → nothing on completionTx; retryable; attempt + 1 after the backoff',
];

function printRow(r: RowResult, seconds: number): void {
  const ok = r.checks.every((c) => c.ok);
  say(`Row ${r.row} · ${r.title}`);
  for (const line of r.story) say(`  ${line}`);
  for (const c of r.checks) printCheck(c);
  say(`  → ${ok ? 'holds' : 'DOES NOT HOLD'} (${seconds.toFixed(1)} s)`);
  say();
}

function printCheck(c: Check): void {
  say(`  ${c.ok ? '✓' : '✗'} ${c.what}`);
  say(`      expected  ${c.expected}`);
  say(`      observed  ${c.observed}`);
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: { rows: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  });
  if (values.help) {
    say('crash-matrix [--rows 1,2,…]   (DATABASE_URL, else the embedded PostgreSQL)');
    return 0;
  }
  const wanted = values.rows
    ? values.rows.split(',').map((s) => Number(s.trim()))
    : ROWS.map((_, i) => i + 1);
  if (wanted.some((n) => !Number.isInteger(n) || n < 1 || n > ROWS.length)) {
    throw new Error(`--rows takes row numbers from 1 to ${ROWS.length}, got ${values.rows}`);
  }

  const db = await resolveDatabaseUrl({
    dir: resolve(process.env.INIT_CWD ?? process.cwd(), '.cyclone'),
  });
  const client = new Client({ connectionString: db.connectionString, schema: ENGINE_SCHEMA });
  const pool = new pg.Pool({ connectionString: db.connectionString, max: 4 });
  pool.on('error', () => {});
  const results: { r: RowResult; ok: boolean }[] = [];
  try {
    await client.migrate();
    await pool.query(OBSERVATION_TABLES);
    // Runs an interrupted earlier invocation left behind would keep a worker slot busy.
    for (const wf of [OneStep, TwoSteps]) {
      for (const run of await client.listRuns({ state: 'running', workflow: wf.name, limit: 1000 }))
        await client.cancel(run.runId);
    }
    const host = new URL(db.connectionString).host;
    say(
      'Cyclone crash matrix: real worker processes, SIGKILL, a stalled worker, a throwing handler',
    );
    say(`database ${host} (schema ${ENGINE_SCHEMA}); leases of 1 s, a recovery sweep every 250 ms`);
    say();

    for (const n of wanted) {
      const play = ROWS[n - 1] as (typeof ROWS)[number];
      const started = Date.now();
      let r: RowResult;
      try {
        r = await play({ databaseUrl: db.connectionString, pool, client });
      } catch (err) {
        r = {
          row: n,
          title: MATRIX[n - 1]?.split(' → ')[0] ?? `row ${n}`,
          story: [],
          checks: [
            check('the scenario ran', 'to the end', `it failed: ${(err as Error).message}`, false),
          ],
        };
      } finally {
        await killAll();
      }
      printRow(r, (Date.now() - started) / 1000);
      results.push({ r, ok: r.checks.every((c) => c.ok) });
    }

    say('The crash matrix (ARCHITECTURE.md), as observed:');
    for (const { r, ok } of results) say(`  ${ok ? '✓' : '✗'} row ${r.row}: ${MATRIX[r.row - 1]}`);
    const failed = results.filter((x) => !x.ok).length;
    say();
    say(
      failed === 0
        ? `All ${results.length} rows hold.`
        : `${failed} of ${results.length} rows do not hold.`,
    );
    return failed === 0 ? 0 : 1;
  } finally {
    await killAll();
    await pool.end();
    await client.close();
    await db.stop();
  }
}

function check(what: string, expected: string, observed: string, ok: boolean): Check {
  return { what, expected, observed, ok };
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`crash-matrix: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
