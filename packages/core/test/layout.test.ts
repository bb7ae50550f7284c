/**
 * The layout rules CI enforces, run against the repository and against a tree made to break
 * them, so a check that stopped looking would fail here.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const SCRIPT = join(ROOT, 'scripts/check-engine-sql.mjs');
const check = (root: string) => spawnSync(process.execPath, [SCRIPT, root], { encoding: 'utf8' });

describe('the engine tables are named only under packages/core/src/sql/', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'cyclone-layout-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('holds for this repository', () => {
    const r = check(ROOT);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });

  it('fails on a statement outside sql/, and passes the same text inside it', () => {
    const file = (path: string, text: string) => {
      mkdirSync(dirname(join(tmp, path)), { recursive: true });
      writeFileSync(join(tmp, path), text);
    };
    file('packages/core/src/sql/claim.ts', 'export const a = `SELECT 1 FROM x.cyclone_steps`;\n');
    file('packages/core/src/migrations.generated.ts', 'CREATE TABLE x.cyclone_runs ();\n');
    expect(check(tmp).status).toBe(0);
    file('packages/ledger/src/read.ts', 'export const b = `SELECT 1 FROM x.cyclone_runs`;\n');
    const r = check(tmp);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('packages/ledger/src/read.ts:1');
  });
});
