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
  await bouncer?.stop();
}, 30_000);
