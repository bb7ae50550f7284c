/**
 * Migrations: idempotent and safe to run concurrently (advisory lock, recorded once); a fresh
 * schema name works end to end; the embedded migrations are in sync with migrations/*.sql.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { migrations } from '../src/migrations.generated.js';
import { createTestDb, type TestDb } from './support/db.js';

const here = dirname(fileURLToPath(import.meta.url));
const coreDir = join(here, '..');
const migrationsDir = join(coreDir, '..', '..', 'migrations');

describe('migrate', () => {
  let db: TestDb;
  const clients: Client[] = [];
  const client = (schema: string) => {
    const c = new Client({ connectionString: db.url, schema, poolSize: 2 });
    clients.push(c);
    return c;
  };

  beforeAll(async () => {
    db = await createTestDb();
  });

  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await db?.drop();
  });

  async function recorded(schema: string) {
    const { rows } = await db.pool.query<{ component: string; name: string }>(
      `SELECT component, name FROM "${schema}".cyclone_migrations ORDER BY component, name`,
    );
    return rows;
  }

  const allNames = migrations.map((m) => m.name).sort();

  it('two clients migrating a new schema at once both succeed; each migration is applied once', async () => {
    const [a, b] = await Promise.all([
      client('cyclone_m1').migrate(),
      client('cyclone_m1').migrate(),
    ]);
    // One of them applied everything, the other found nothing to do.
    expect([...(a ?? []), ...(b ?? [])].sort()).toEqual(allNames);
    expect([a?.length, b?.length].sort()).toEqual([0, allNames.length]);
    expect(await recorded('cyclone_m1')).toEqual(
      allNames.map((name) => ({ component: 'core', name })),
    );
  });

  it('many concurrent migrations of another new schema: all succeed, recorded once', async () => {
    const results = await Promise.all(
      Array.from({ length: 6 }, () => client('cyclone_m2').migrate()),
    );
    expect(results.flat().sort()).toEqual(allNames);
    expect(await recorded('cyclone_m2')).toHaveLength(allNames.length);
  });

  it('migrating again does nothing', async () => {
    expect(await client('cyclone_m1').migrate()).toEqual([]);
    expect(await client('cyclone_m1').migrate()).toEqual([]);
    expect(await recorded('cyclone_m1')).toHaveLength(allNames.length);
    // The template-cloned default schema is up to date too.
    expect(await client('cyclone').migrate()).toEqual([]);
  });

  it("the previous version's run insert still works on the migrated schema (a rolling deploy)", async () => {
    // Its ON CONFLICT names no predicate: only a non-partial unique index on (workflow,
    // submit_key) can serve it, so the constraint must stay until no such version runs.
    const insert = (key: string | null) =>
      db.pool.query(
        `INSERT INTO cyclone.cyclone_runs
           (id, workflow, state, input, submit_key, input_hash, steps_remaining, steps_active)
         VALUES (gen_random_uuid(), 'previous_version', 'running', '{}', $1, 'h', 1, 1)
         ON CONFLICT (workflow, submit_key) DO NOTHING RETURNING id`,
        [key],
      );
    await client('cyclone').migrate();
    expect((await insert(null)).rowCount).toBe(1);
    expect((await insert('k')).rowCount).toBe(1);
    expect((await insert('k')).rowCount).toBe(0);
    await db.pool.query(`DELETE FROM cyclone.cyclone_runs WHERE workflow = 'previous_version'`);
  });

  it('a migrated schema of another name runs workflows on its own tables and channel', async () => {
    const c = client('cyclone_m1');
    const echo = newAction('echo', async (_ctx, input: { v: number }) => ({ v: input.v * 2 }));
    const wf = newWorkflow('echo', { nodes: { only: { action: echo } } });
    const worker = new Worker({ client: c, workflows: [wf], concurrency: 2 });
    await worker.start();
    try {
      const { runId } = await c.submit(wf, { v: 21 });
      const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
      expect(run.state).toBe('completed');
      expect(run.steps[0]?.output).toEqual({ v: 42 });
    } finally {
      await worker.stop({ graceMs: 1_000 });
    }
    // The run lives in cyclone_m1 only.
    const { rows } = await db.pool.query<{ m1: number; m2: number; main: number }>(
      `SELECT (SELECT count(*)::int FROM cyclone_m1.cyclone_runs) AS m1,
              (SELECT count(*)::int FROM cyclone_m2.cyclone_runs) AS m2,
              (SELECT count(*)::int FROM cyclone.cyclone_runs) AS main`,
    );
    expect(rows[0]).toEqual({ m1: 1, m2: 0, main: 0 });
  });

  it('src/migrations.generated.ts is in sync with migrations/*.sql', async () => {
    const script = pathToFileURL(join(coreDir, '..', '..', 'scripts', 'embed-migrations.mjs')).href;
    const { render } = (await import(script)) as { render: (dir: string) => string };
    const onDisk = readFileSync(join(coreDir, 'src', 'migrations.generated.ts'), 'utf8');
    expect(onDisk, 'run `pnpm --filter @cyclone/core embed-migrations`').toBe(
      render(migrationsDir),
    );

    // And the module content matches the files one by one.
    const files = readdirSync(migrationsDir)
      .filter((f) => f.endsWith('.sql'))
      .sort();
    expect(migrations.map((m) => `${m.name}.sql`)).toEqual(files);
    for (const m of migrations) {
      expect(m.sql).toBe(readFileSync(join(migrationsDir, `${m.name}.sql`), 'utf8'));
    }
  });
});
