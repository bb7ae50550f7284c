/**
 * The setup file of the `@pgbouncer` vitest projects (`pgbouncerProject` in vitest.shared.ts):
 * a PgBouncer of the test file's own (transaction pooling, pgbouncer.ts), started before the
 * file's hooks and stopped after them; its port in `CYCLONE_TEST_PGBOUNCER_PORT` (via.ts).
 */
import { afterAll, beforeAll } from 'vitest';
import { type PgBouncer, startPgBouncer } from './pgbouncer.js';

let bouncer: PgBouncer | undefined;

beforeAll(async () => {
  bouncer = await startPgBouncer();
  process.env.CYCLONE_TEST_PGBOUNCER_PORT = String(bouncer.port);
}, 30_000);

afterAll(async () => {
  delete process.env.CYCLONE_TEST_PGBOUNCER_PORT;
  if (!bouncer) return;
  try {
    // A file of this project whose engine never went through PgBouncer tested nothing new.
    const stats = await bouncer.admin('SHOW STATS');
    const xacts = stats.reduce((n, r) => n + Number(r.total_xact_count ?? 0), 0);
    if (xacts === 0) {
      throw new Error('no transaction went through PgBouncer: give the engine engineUrl(db.url)');
    }
  } finally {
    await bouncer.stop();
  }
}, 30_000);
