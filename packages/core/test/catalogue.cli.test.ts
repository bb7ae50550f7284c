/**
 * Bad-input catalogue, the `cyclone` CLI: wrong arguments — SQL in ids, node names, filters and
 * schema names; bad numbers; NUL bytes; options without values; unknown commands — each give
 * exit 2 (bad usage) or 1 (a failed operation) with one line on stderr and no stack trace; and
 * generated argument lists (fast-check, from a vocabulary of commands, options and nasty values)
 * never crash the CLI, never exit with anything but 0, 1 or 2, never print a stack, and never
 * change the database (row counts and checksums compared before and after).
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../src/cli.js';
import { Client, newAction, newWorkflow } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { type Fingerprint, fingerprint } from './support/fingerprint.js';

const SEED = Number(process.env.FC_SEED ?? 20261130);
/** A URL that refuses at once (never a DNS name: that could be slow). */
const REFUSED = 'postgres://root@127.0.0.1:1/nowhere';
const UUID = '00000000-0000-4000-8000-00000000abcd';

let db: TestDb;
let client: Client;
let runId: string;
let before: Fingerprint;

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

async function cli(args: string[], env: Record<string, string> = {}): Promise<Result> {
  let stdout = '';
  let stderr = '';
  const code = await main(['--database-url', db.url, ...args], {
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s) },
    env,
  });
  return { code, stdout, stderr };
}

const noStack = (r: Result) => expect(r.stderr).not.toMatch(/\n\s+at /);

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url });
  const wf = newWorkflow('catalogue_cli', {
    nodes: { a: { action: newAction('catalogue_cli_a', async () => null) } },
  });
  ({ runId } = await client.submit(wf, {})); // no worker: it stays running
  before = await fingerprint(db.pool);
});

afterAll(async () => {
  await client?.close();
  await db?.drop();
});

describe('wrong arguments, one by one', () => {
  it.each([
    ['a run id that is SQL', ['run', "'; DROP TABLE cyclone.cyclone_runs; --"], 1, /not found/],
    ['a run id with a NUL', ['run', `${UUID}\u0000`], 1, /not found/],
    ['cancel of a run id that is SQL', ['cancel', "' OR 1=1 --"], 1, /not found/],
    [
      'retry of an unknown run, with a node that is SQL',
      ['retry', UUID, "n'; DELETE FROM cyclone.cyclone_steps; --"],
      1,
      /not found/,
    ],
    ['retry --all of a run id that is SQL', ['retry', "x' OR 'a'='a", '--all'], 1, /not found/],
    [
      'a state filter that is SQL',
      ['runs', '--state', "completed' OR '1'='1"],
      2,
      /Allowed choices/,
    ],
    ['a limit that is SQL', ['runs', '--limit', '1; DROP TABLE x'], 2, /--limit/],
    ['a limit in exponent form', ['runs', '--limit', '1e3'], 2, /--limit/],
    ['a hexadecimal limit', ['runs', '--limit', '0x10'], 2, /--limit/],
    ['a negative limit', ['runs', '--limit', '-1'], 2, /--limit/],
    ['a limit over 1000', ['runs', '--limit', '1001'], 2, /--limit/],
    [
      'a schema name that is SQL',
      ['--schema', 'cyclone"; DROP SCHEMA cyclone CASCADE; --', 'runs'],
      2,
      /not a plain identifier/,
    ],
    ['an upper-case schema name', ['--schema', 'Cyclone', 'runs'], 2, /not a plain identifier/],
    ['an empty schema name', ['--schema', '', 'runs'], 2, /not a plain identifier/],
    [
      'a schema name of 56 characters',
      ['--schema', 's'.repeat(56), 'runs'],
      2,
      /not a plain identifier/,
    ],
    [
      'a schema name with a NUL',
      ['--schema', 'cy\u0000clone', 'runs'],
      2,
      /not a plain identifier/,
    ],
    ['an option without its value', ['runs', '--state'], 2, /argument missing/],
    ['--database-url without a value', ['--database-url'], 2, /argument missing/],
    ['an unknown short option', ['-x'], 2, /unknown option '-x'/],
    ['too many arguments', ['cancel', UUID, UUID, UUID], 2, /too many arguments/],
  ])('%s → exit %i, one line', async (_what, args, code, pattern) => {
    const r = await cli(args);
    expect(r.code).toBe(code);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^cyclone: [^\n]+\n$/);
    expect(r.stderr).toMatch(pattern);
    noStack(r);
  });

  it('a workflow filter with a NUL matches no run (no workflow can have that name)', async () => {
    const r = await cli(['runs', '--workflow', 'a\u0000b']);
    expect(r).toMatchObject({ code: 0, stdout: 'no runs\n', stderr: '' });
  });

  it('SQL in a workflow filter is just a name: no runs', async () => {
    const r = await cli(['runs', '--workflow', "x' OR '1'='1"]);
    expect(r).toMatchObject({ code: 0, stdout: 'no runs\n', stderr: '' });
  });

  it('a node name that is SQL, on a real run: exit 1, no such node', async () => {
    const r = await cli(['retry', runId, "a' OR '1'='1"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^cyclone: run [0-9a-f-]+ has no node 'a' OR '1'='1'\n$/);
  });

  it('a bad CYCLONE_SCHEMA in the environment is bad usage too', async () => {
    const r = await cli(['runs'], { CYCLONE_SCHEMA: 'public; DROP TABLE x' });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^cyclone: schema name .* is not a plain identifier/);
  });

  it('none of it changed the database', async () => {
    expect(await fingerprint(db.pool)).toEqual(before);
  });
});

describe('generated argument lists', () => {
  const nasty = fc.constantFrom(
    "'; DROP TABLE cyclone.cyclone_runs; --",
    "' OR '1'='1",
    'a\u0000b',
    '"',
    '\\',
    '%',
    '$1',
    '😀',
    '',
    ' ',
    '-',
    '--json',
    'x'.repeat(5000),
  );
  const value = fc.oneof(
    nasty,
    fc.constantFrom(
      UUID,
      'not-a-uuid',
      '0',
      '1',
      '1000',
      '1001',
      '-1',
      '1e3',
      'NaN',
      'running',
      'done',
    ),
    fc.string({ unit: 'binary', maxLength: 20 }).filter((s) => !s.includes('\u0000')),
  );
  const token: fc.Arbitrary<string[]> = fc.oneof(
    fc
      .constantFrom('migrate', 'runs', 'run', 'retry', 'cancel', 'frobnicate', 'help')
      .map((c) => [c]),
    fc.constantFrom('--json', '--all', '--help', '-V', '--', '-x', '--colour').map((o) => [o]),
    fc.tuple(fc.constantFrom('--state', '--workflow', '--limit'), value).map(([o, v]) => [o, v]),
    // Schema names: the default, or invalid ones only (a valid new one would be a new schema).
    fc
      .constantFrom('cyclone', 'Cyclone', 'a-b', 'x;y', '1a', 's'.repeat(56), "c' --")
      .map((s) => ['--schema', s]),
    fc.constant<string[]>(['--database-url', REFUSED]),
    value.map((v) => [v]),
  );
  const argv = fc.array(token, { maxLength: 6 }).map((ts) => ts.flat());

  it('exit 0, 1 or 2; failures are one line without a stack; the database never changes', async () => {
    await fc.assert(
      fc.asyncProperty(argv, async (args) => {
        // Never a real run id in the vocabulary: no generated command can cancel or retry one.
        expect(args).not.toContain(runId);
        const r = await cli(args);
        expect([0, 1, 2]).toContain(r.code);
        noStack(r);
        if (r.code === 1) expect(r.stderr).toMatch(/^cyclone: [^\n]+\n$/);
        if (r.code === 2 && r.stderr !== '') {
          expect(r.stderr).toMatch(/^(cyclone: [^\n]+\n|Usage: cyclone)/);
        }
      }),
      { seed: SEED, numRuns: 80 },
    );
    expect(await fingerprint(db.pool)).toEqual(before);
  });
});
