/**
 * A large finished history for plan tests and the bench: `runs` finished runs (one step each) in
 * a few seconds of SQL, plus a small live set (running runs with claimable and leased steps), then
 * ANALYZE, so that the planner sees a table the size of a busy deployment's.
 *
 * Fast by building the indexes once after the rows are in rather than entry by entry: the
 * indexes and unique constraints of cyclone_runs and cyclone_steps are dropped, the tables made
 * UNLOGGED (no WAL for the rows), the rows inserted by generate_series, then every index and
 * constraint is created again from its own definition. The foreign keys onto cyclone_runs are
 * dropped and not restored (plans do not depend on them): use a database of its own, for reading.
 */
import type pg from 'pg';

/** What `seedHistory` made. */
export interface SeededHistory {
  /** The workflows of the runs (`wf_0` … `wf_7`). */
  workflows: string[];
  /** A finished run in the middle of the history. */
  finishedRunId: string;
  /** A failed run. */
  failedRunId: string;
  /** A running run (with a claimable step). */
  runningRunId: string;
}

/** Makes the run id of row `i`: a v4-shaped uuid, in an order unrelated to `i`. */
const ID = (i: string) =>
  `('6f1c0000-0000-4000-8000-' || lpad(to_hex((${i}::bigint * 48271) % 281474976710655), 12, '0'))::uuid`;

/**
 * Seeds `runs` finished runs (1 in 200 failed, 1 in 500 cancelled, the rest completed; created
 * 100 ms apart from 2026-01-01, over 8 workflows, with submit keys `key-<i>`), one step each, and
 * `live` running runs whose step is claimable (available), 10 of them leased, 2 with the lease
 * expired. Schema `cyclone`. Takes about 15 s for 1,000,000 runs on an idle 2-core machine.
 */
export async function seedHistory(
  pool: pg.Pool,
  options: { runs: number; live?: number },
): Promise<SeededHistory> {
  const live = options.live ?? 200;
  const c = await pool.connect();
  try {
    await c.query("SET maintenance_work_mem = '256MB'");
    await c.query('SET synchronous_commit = off');
    const { rows: defs } = await c.query<{ def: string }>(`
      SELECT format('ALTER TABLE %s ADD CONSTRAINT %I %s', conrelid::regclass, conname,
                    pg_get_constraintdef(oid)) AS def, 1 AS ord
      FROM pg_constraint
      WHERE conrelid IN ('cyclone.cyclone_runs'::regclass, 'cyclone.cyclone_steps'::regclass)
        AND contype IN ('p', 'u')
      UNION ALL
      SELECT indexdef, 2 FROM pg_indexes i
      WHERE schemaname = 'cyclone' AND tablename IN ('cyclone_runs', 'cyclone_steps')
        AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conname = i.indexname)
      ORDER BY 2`);
    await c.query(`DO $$ DECLARE r record; BEGIN
      FOR r IN SELECT conrelid::regclass AS t, conname FROM pg_constraint
               WHERE confrelid = 'cyclone.cyclone_runs'::regclass LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.t, r.conname);
      END LOOP;
      FOR r IN SELECT conrelid::regclass AS t, conname FROM pg_constraint
               WHERE conrelid IN ('cyclone.cyclone_runs'::regclass, 'cyclone.cyclone_steps'::regclass)
                 AND contype IN ('p', 'u') LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.t, r.conname);
      END LOOP;
      FOR r IN SELECT schemaname, indexname FROM pg_indexes
               WHERE schemaname = 'cyclone' AND tablename IN ('cyclone_runs', 'cyclone_steps') LOOP
        EXECUTE format('DROP INDEX %I.%I', r.schemaname, r.indexname);
      END LOOP;
    END $$`);
    await c.query('ALTER TABLE cyclone.cyclone_steps SET UNLOGGED');
    await c.query('ALTER TABLE cyclone.cyclone_runs SET UNLOGGED');
    await c.query(
      `INSERT INTO cyclone.cyclone_runs (id, workflow, state, input, submit_key, input_hash,
         steps_remaining, steps_active, created_at, updated_at, completed_at)
       SELECT ${ID('i')}, 'wf_' || (i % 8),
              CASE WHEN i % 200 = 0 THEN 'failed' WHEN i % 500 = 1 THEN 'cancelled'
                   ELSE 'completed' END,
              '{}'::jsonb, 'key-' || i, '', 0, 0, ts, ts, ts + interval '1 second'
       FROM generate_series(1, $1::int) i,
            LATERAL (SELECT timestamptz '2026-01-01 00:00:00+00' + i * interval '100 ms') t(ts)`,
      [options.runs],
    );
    await c.query(
      `INSERT INTO cyclone.cyclone_runs (id, workflow, state, input, input_hash, steps_remaining,
         steps_active, created_at, updated_at)
       SELECT ${ID('($1::int + i)')}, 'wf_' || (i % 8), 'running', '{}'::jsonb, '', 1, 1,
              now() - i * interval '1 second', now()
       FROM generate_series(1, $2::int) i`,
      [options.runs, live],
    );
    await c.query(
      `INSERT INTO cyclone.cyclone_steps (run_id, node, workflow, action, state, attempt,
         max_attempts, deps_remaining, output, created_at, updated_at, started_at, completed_at,
         scheduled_at)
       SELECT id, 'only', workflow, 'act',
              CASE state WHEN 'completed' THEN 'completed' WHEN 'failed' THEN 'discarded'
                         WHEN 'cancelled' THEN 'cancelled' ELSE 'available' END,
              CASE WHEN state = 'running' THEN 0 ELSE 1 END, 3, 0,
              CASE WHEN state = 'completed' THEN '{"ok":true}'::jsonb END,
              created_at, updated_at, CASE WHEN state <> 'running' THEN created_at END,
              completed_at, created_at
       FROM cyclone.cyclone_runs`,
    );
    // 10 live steps leased (as claimed by two workers), 2 of them with the lease expired.
    await c.query(
      `UPDATE cyclone.cyclone_steps s
       SET state = 'running', attempt = 1, lease_owner = 'worker-' || (x.n % 2),
           lease_expires_at = now() + CASE WHEN x.n <= 2 THEN interval '-1 minute'
                                           ELSE interval '1 minute' END
       FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM cyclone.cyclone_runs
             WHERE state = 'running' LIMIT 10) x
       WHERE s.run_id = x.id`,
    );
    for (const { def } of defs) await c.query(def);
    await c.query('ANALYZE cyclone.cyclone_runs');
    await c.query('ANALYZE cyclone.cyclone_steps');
    const { rows } = await c.query<{ finished: string; failed: string; running: string }>(
      `SELECT ${ID('($1::int / 2 + 2)')}::text AS finished, ${ID('200')}::text AS failed,
              ${ID('($1::int + 100)')}::text AS running`,
      [options.runs],
    );
    const r = rows[0] as { finished: string; failed: string; running: string };
    return {
      workflows: Array.from({ length: 8 }, (_, i) => `wf_${i}`),
      finishedRunId: r.finished,
      failedRunId: r.failed,
      runningRunId: r.running,
    };
  } finally {
    c.release();
  }
}
