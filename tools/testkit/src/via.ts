/**
 * How the engine under test reaches PostgreSQL: directly, or through PgBouncer in transaction
 * pooling mode. The packages' `@pgbouncer` vitest projects (`pgbouncerProject` in
 * vitest.shared.ts) run chosen test files again with `CYCLONE_TEST_VIA=pgbouncer`; their setup
 * file (pgbouncer-setup.ts) starts a PgBouncer for each test file and names its port in
 * `CYCLONE_TEST_PGBOUNCER_PORT`. A test gives the engine (its `Client`, its `Worker`, its worker
 * processes) `engineUrl(db.url)` and these options, and keeps `db.pool` (direct) for its own
 * assertions. Worker processes inherit both variables.
 */

/** The way this test process's engine reaches the database. */
export type TestVia = 'direct' | 'pgbouncer';

/** `CYCLONE_TEST_VIA`: 'pgbouncer', else 'direct'. */
export const testVia: TestVia =
  process.env.CYCLONE_TEST_VIA === 'pgbouncer' ? 'pgbouncer' : 'direct';

/**
 * The URL the engine connects with: `url` itself, or through PgBouncer its host and port
 * replaced by the test file's PgBouncer's (same database and user).
 * @throws under `CYCLONE_TEST_VIA=pgbouncer` before the setup file started PgBouncer.
 */
export function engineUrl(url: string): string {
  if (testVia === 'direct') return url;
  const port = process.env.CYCLONE_TEST_PGBOUNCER_PORT;
  if (!port) {
    throw new Error('CYCLONE_TEST_PGBOUNCER_PORT is not set: pgbouncer-setup.ts did not run');
  }
  const u = new URL(url);
  u.hostname = '127.0.0.1';
  u.port = port;
  return u.toString();
}

/**
 * `Client` options for the way in (docs/operations.md): no named prepared statements through
 * PgBouncer (1.18 has no `max_prepared_statements`; a statement prepared on one server
 * connection is missing on the next).
 */
export const engineClientOptions: { preparedStatements?: boolean } =
  testVia === 'pgbouncer' ? { preparedStatements: false } : {};

/**
 * `Worker` options for the way in (docs/operations.md): no LISTEN through PgBouncer (a
 * transaction-pooled connection has no session to listen on; the worker polls).
 */
export const engineWorkerOptions: { listen?: boolean } =
  testVia === 'pgbouncer' ? { listen: false } : {};
