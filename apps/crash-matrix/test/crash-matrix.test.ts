/**
 * The crash-matrix program, run as it is run by hand (a child process with its worker
 * processes), on a test database: every row must hold and the exit code must say so.
 */
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDb, type TestDb } from './support/db.js';

const appDir = join(dirname(fileURLToPath(import.meta.url)), '..');
let db: TestDb;

beforeAll(async () => {
  db = await createTestDb();
});

afterAll(async () => {
  await db?.drop();
});

it('reproduces every row of the crash matrix, and exits 0', async () => {
  const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: db.url };
  delete env.NODE_OPTIONS; // vitest's loader flags must not reach the children
  const child = spawn(
    process.execPath,
    ['--conditions=@cyclone/source', '--import', 'tsx', 'src/main.ts'],
    { cwd: appDir, env, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), 80_000);
  const code = await new Promise<number | null>((r) => child.on('close', r));
  clearTimeout(timer);

  expect(out).toContain('All 5 rows hold.');
  for (let row = 1; row <= 5; row++) expect(out).toMatch(new RegExp(`✓ row ${row}: `));
  expect(out).not.toContain('✗');
  expect(code, out).toBe(0);
});
