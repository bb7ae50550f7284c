/**
 * Security basics:
 * - every statement is parameterised: a static scan (support/sql-scan.ts) of packages/*\/src
 *   finds no SQL built from anything but the quoted schema, table-name constants, placeholder
 *   numbers and a short list of reviewed, validated identifiers; and the scan is shown to catch
 *   the mistakes it exists for;
 * - the configurable schema name is validated (only `[a-z_][a-z0-9_]{0,54}`) and quoted: a bad
 *   one is a `ConfigError` before anything is created, and reserved words work as schema names;
 * - provider secrets never end up in stored step errors, nor in the worker's logs or the CLI's
 *   output: `redactSecrets` on known shapes (Stripe, SendGrid, Twilio, Basic/Bearer, URL
 *   passwords), applied where a failed attempt's message and stack are recorded.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../src/cli.js';
import { Client, ConfigError, type Logger, newAction, newWorkflow, Worker } from '../src/index.js';
import { applyMigrations, quoteSchema, REDACTED, redactSecrets } from '../src/internal.js';
import { createTestDb, type TestDb } from './support/db.js';
import { fingerprint } from './support/fingerprint.js';
import { type Reviewed, scanSource, sourceFiles } from './support/sql-scan.js';

const SEED = Number(process.env.FC_SEED ?? 20261130);
const PACKAGES = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** Interpolations into SQL reviewed by hand, each with why it is safe. */
const REVIEWED: Reviewed[] = [
  {
    file: 'core/src/client.ts',
    expression: 'channelOf(this.schema)',
    reason:
      'the NOTIFY channel name cyclone_<schema>, not SQL text: the schema was validated by quoteSchema on the line before, and the channel travels as a pg_notify parameter',
  },
  ...['run', 'node', 'attempt', 'from', 'before', 'alias', 'runId'].map((expression) => ({
    file: 'core/src/sql/fence.ts',
    expression,
    reason:
      "the fence fragments' operands: SQL expressions written by Cyclone's own statement builders ('$n' placeholders, column references such as l.run_id, a table alias), never data",
  })),
  {
    file: 'core/src/sql/metrics.ts',
    expression: 'PRIORITIES(s)',
    reason:
      "the claim's loose scan over priorities (sql/claim.ts PRIORITIES), given the quoted schema: a builder of Cyclone's own, never data",
  },
  {
    file: 'core/src/sql/registry.ts',
    expression: 'countedSql(s, 9)',
    reason:
      "the one worker's report's throughput tail: the module's builder countedSql, given the quoted schema and the literal number of its first placeholder",
  },
  {
    file: 'core/src/sql/registry.ts',
    expression: 'countedSql(s, 7)',
    reason:
      "the shared report's throughput tail: the module's builder countedSql, given the quoted schema and the literal number of its first placeholder",
  },
  {
    file: 'core/src/sql/claim.ts',
    expression: 'upstream(s)',
    reason:
      "claimFrom's upstream column: one of the two module builders WITH_UPSTREAM and WITHOUT_UPSTREAM (the parameter's type allows only those), given the quoted schema",
  },
  ...[
    'shares.ctes',
    'shares.rows',
    'shares.agg',
    'shares.unnest',
    'shares.column',
    'shares.value',
  ].map((expression) => ({
    file: 'core/src/sql/claim.ts',
    expression,
    reason:
      "claimFrom's owners of the claimed rows: a field of one of the module constants ONE_WORKER ('c', '$3', nothing else) and SHARED (the CTEs numbering the rows and the workers' shares over placeholders $3 and $6, their join, the aggregate, unnest and column of w.id), constant text",
  })),
  {
    file: 'core/src/sql/flow.ts',
    expression: 'BigInt.asIntN(64, key).toString()',
    reason:
      "beginLockedSql's advisory lock key: a bigint made by actionLockKey (a hash of the schema and action name), printed as a decimal integer, never data",
  },
  {
    file: 'core/src/sql/flow.ts',
    expression: 'upstream(s)',
    reason:
      "claimLimitedFrom's upstream column: one of the two module builders UPSTREAM and NO_UPSTREAM (the parameter's type allows only those), given the quoted schema",
  },
  {
    file: 'core/src/sql/complete.ts',
    expression: 'to',
    reason:
      "completeFrom's target state: one of the two module constants COMPLETED and SKIPPED (the parameter's type allows only those), fixed SQL literals",
  },
  {
    file: 'core/src/sql/complete.ts',
    expression: 'extra',
    reason:
      "the extra select item of completeFrom and completeLeafFrom: one of the module constants NO_EXTRA, IDLE_LIMIT and LEAF_IDLE_LIMIT (the parameters' types allow only those), fixed SQL with a placeholder",
  },
  {
    file: 'core/src/sql/complete.ts',
    expression: 'returning',
    reason:
      "doneUpdate's returned columns: one of the two module constants FULL_RETURNING and LEAF_RETURNING (the parameter's type allows only those), fixed SQL",
  },
  {
    file: 'core/src/sql/complete.ts',
    expression: 'doneUpdate(s, to, FULL_RETURNING)',
    reason:
      "the full completion's fenced step transition: the module builder doneUpdate given the quoted schema, the target state constant and a fixed column list",
  },
  {
    file: 'core/src/sql/complete.ts',
    expression: 'doneUpdate(s, to, LEAF_RETURNING)',
    reason:
      "the leaf completion's fenced step transition: the module builder doneUpdate given the quoted schema, the target state constant and a fixed column list",
  },
  {
    file: 'core/src/sql/complete.ts',
    expression: 'releasedRun(input)',
    reason:
      "the released rows' run for a one-step completion: the module function releasedRun, which returns one of two fixed strings (a condition on placeholder $1, or nothing) by which input constant it is given",
  },
  {
    file: 'core/src/sql/complete.ts',
    expression: 'from(s)',
    reason:
      "completeFrom's result clause: one of the two module builders FROM_DONE and FROM_DONE_OR_FENCED_OUT (the parameter's type allows only those), given the quoted schema",
  },
  {
    file: 'core/src/sql/complete.ts',
    expression: 'input',
    reason:
      "completeFrom's input: one of the two module constants BATCH_INPUT and ONE_INPUT (the parameter's type allows only those), fixed SQL with placeholders",
  },
  ...['core/src/sql/complete.ts', 'core/src/sql/flow.ts'].map((file) => ({
    file,
    expression: 'runStepDiscardedSql(s)',
    reason:
      "the run's side of a step's discard (sql/discard.ts), given the quoted schema: fixed SQL of Cyclone's own, shared by the two discards so they cannot drift, never data",
  })),
  {
    file: 'core/src/listener.ts',
    expression: 'parts.channel',
    reason:
      'LISTEN takes no parameters: the channel is cyclone_<schema>, the schema validated as [a-z_][a-z0-9_]{0,54}, so a plain identifier, and double-quoted',
  },
  ...['p.table', "all.join(', ')", "p.keyCols.join(', ')", 'onConflict', 'where', 'set'].map(
    (expression) => ({
      file: 'idempotency/src/on-conflict.ts',
      expression,
      reason:
        'insertOnce/upsertOnce: table and column names from quoteIdent (validated as [A-Za-z_][A-Za-z0-9_]{0,62}, then double-quoted), placeholders $1…$n and the fixed DO NOTHING / DO UPDATE SET clause',
    }),
  ),
  {
    file: 'idempotency/src/on-conflict.ts',
    expression: "values\n      .map((_, i) => `$${i + 1}`)\n      .join(', ')",
    reason: 'the placeholder list $1, $2, … of the values',
  },
  ...["clauses.join(' AND ')", 'where', 'order'].map((expression) => ({
    file: 'core/src/sql/ui.ts',
    expression,
    reason:
      "runsPageSql's WHERE and ORDER BY: joined from the function's own fragments (a state literal from STATE_CLAUSE, fixed comparisons with '$n' placeholders) and one of two module constants; every value is a bind parameter",
  })),
];

describe('every statement is parameterised', () => {
  it('no SQL in packages/*/src is built from data', () => {
    const files = readdirSync(PACKAGES).flatMap((p) => {
      try {
        return sourceFiles(join(PACKAGES, p, 'src'));
      } catch {
        return [];
      }
    });
    expect(files.length).toBeGreaterThan(30);
    let templates = 0;
    const findings: string[] = [];
    for (const f of files) {
      const r = scanSource(f, readFileSync(f, 'utf8'), REVIEWED);
      templates += r.sqlTemplates;
      for (const x of r.findings) findings.push(`${x.file}:${x.line}: ${x.expression} (${x.why})`);
    }
    expect(findings).toEqual([]);
    // The scan saw the engine's SQL (a broken scan would pass by seeing nothing).
    expect(templates).toBeGreaterThan(40);
  });

  it('the scan catches data in SQL, SQL joined with +, and an unvalidated schema', () => {
    const bad = `
      import * as sql from './sql.js';
      const TABLE = 'jobs';
      export async function f(pool, id, name, schema) {
        await pool.query(\`SELECT * FROM \${TABLE} WHERE id = '\${id}'\`);
        await pool.query('DELETE FROM jobs WHERE name = ' + name);
        const q = schema;
        await pool.query(\`SELECT 1 FROM \${q}.jobs\`);
        await pool.query(sql.claim(schema));
        await pool.query(\`\${name}\`);
      }`;
    const r = scanSource('bad.ts', bad);
    expect(r.findings.map((x) => x.expression)).toEqual(
      expect.arrayContaining([
        'id',
        "'DELETE FROM jobs WHERE name = ' + name",
        'q = schema',
        'sql.claim(schema)',
        'name',
      ]),
    );
    const good = `
      import * as sql from './sql.js';
      const TABLE = 'jobs';
      export async function f(client, id) {
        const q = quoteSchema(client.schema);
        await client.pool.query(\`SELECT * FROM \${q}.\${TABLE} WHERE id = $1\`, [id]);
        await client.pool.query(sql.claim(client.q), [id]);
      }`;
    expect(scanSource('good.ts', good).findings).toEqual([]);
  });
});

describe('the schema name is validated and quoted', () => {
  let db: TestDb;

  beforeAll(async () => {
    db = await createTestDb();
  });

  afterAll(async () => {
    await db?.drop();
  });

  it('quoteSchema returns "name" for a plain identifier, and ConfigError for anything else', () => {
    const valid = /^[a-z_][a-z0-9_]{0,54}$/;
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ unit: 'binary', maxLength: 70 }),
          fc.stringMatching(valid),
          fc.constantFrom('public"; DROP SCHEMA public; --', 'a"b', 'a.b', 'A', 's'.repeat(56), ''),
        ),
        (name) => {
          if (valid.test(name)) {
            expect(quoteSchema(name)).toBe(`"${name}"`);
          } else {
            expect(() => quoteSchema(name)).toThrow(ConfigError);
          }
        },
      ),
      { seed: SEED, numRuns: 500 },
    );
    for (const notAString of [undefined, null, 42, {}, ['cyclone']]) {
      expect(() => quoteSchema(notAString as never)).toThrow(ConfigError);
    }
  });

  it('a bad schema name is refused by Client and migrations before anything is created', async () => {
    const before = await fingerprint(db.pool);
    for (const schema of [
      'cyclone"; DROP SCHEMA cyclone CASCADE; --',
      'Cyclone',
      'a-b',
      '1x',
      'x'.repeat(56),
      'pg catalog',
      'é',
    ]) {
      expect(() => new Client({ connectionString: db.url, schema })).toThrow(ConfigError);
      await expect(applyMigrations(db.pool, schema, 'core', [])).rejects.toBeInstanceOf(
        ConfigError,
      );
    }
    expect(await fingerprint(db.pool)).toEqual(before);
  });

  it('reserved words are fine as schema names, because they are quoted: a workflow runs in "select"', async () => {
    const client = new Client({ connectionString: db.url, schema: 'select' });
    const wf = newWorkflow('in_select', {
      nodes: {
        a: { action: newAction('in_select_a', async () => ({ ok: true })) },
        b: { action: newAction('in_select_b', async (ctx) => ctx.upstream('a')), after: ['a'] },
      },
    });
    const worker = new Worker({ client, workflows: [wf], pollIntervalMs: 50 });
    try {
      await client.migrate();
      await worker.start();
      const { runId } = await client.submit(wf, {});
      const run = await client.waitForRun(runId, { timeoutMs: 15_000, pollMs: 25 });
      expect(run.state).toBe('completed');
      const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM "select".cyclone_runs');
      expect(rows[0].n).toBe(1);
    } finally {
      await worker.stop({ graceMs: 2_000 });
      await client.close();
    }
  });
});

/** Secret-shaped values of the kinds the providers use (not real credentials). */
const SECRETS = {
  stripeLive: `sk_live_${'51H8'.repeat(6)}AbCdEf`,
  stripeTest: 'sk_test_4eC39HqLyjWDarjtT1zdp7dc',
  stripeRestricted: 'rk_live_51H8abcdefghijklmnopqrstu',
  stripeWebhook: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  sendgrid: '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',
  twilioToken: 'f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8',
  basic: Buffer.from(
    'AC0123456789abcdef0123456789abcdef:f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8',
  ).toString('base64'),
  bearer:
    'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U',
  dbPassword: 'hunter2-db-Passw0rd',
};

/** An error as an SDK might throw it, quoting credentials in its message. */
function leakyMessage(): string {
  return [
    `Invalid API Key provided: ${SECRETS.stripeLive} (also tried ${SECRETS.stripeTest}, ${SECRETS.stripeRestricted})`,
    `webhook secret ${SECRETS.stripeWebhook}`,
    `sendgrid request failed with key ${SECRETS.sendgrid}`,
    `twilio: Authorization: Basic ${SECRETS.basic}`,
    `twilio: AC0123456789abcdef0123456789abcdef:${SECRETS.twilioToken}`,
    `authToken=${SECRETS.twilioToken}`,
    `upstream said: Authorization: Bearer ${SECRETS.bearer}`,
    `connecting to postgres://app:${SECRETS.dbPassword}@db.internal:5432/app`,
  ].join('\n');
}

describe('secrets are redacted', () => {
  it('each known shape is redacted; the prefix that names it is kept', () => {
    const out = redactSecrets(leakyMessage());
    for (const [name, value] of Object.entries(SECRETS)) {
      expect(out, name).not.toContain(value);
    }
    expect(out).toContain(`sk_live_${REDACTED}`);
    expect(out).toContain(`sk_test_${REDACTED}`);
    expect(out).toContain(`rk_live_${REDACTED}`);
    expect(out).toContain(`SG.${REDACTED}`);
    expect(out).toContain(`Basic ${REDACTED}`);
    expect(out).toContain(`Bearer ${REDACTED}`);
    expect(out).toContain(`AC0123456789abcdef0123456789abcdef:${REDACTED}`);
    expect(out).toContain(`postgres://app:${REDACTED}@db.internal:5432/app`);
    expect(redactSecrets(out)).toBe(out); // idempotent
  });

  it('what is not a secret is left alone', () => {
    const plain = [
      'pk_live_51H8abcdefghijklmnop is publishable',
      'idempotency key 7d0c1a2b-0000-4000-8000-000000000000:charge',
      'Basic authentication failed; Bearer token missing',
      'card_declined: Your card was declined.',
      'run 7d0c1a2b-0000-4000-8000-000000000000 node charge attempt 3',
      'postgres://root@127.0.0.1:5432/test',
      'at file:///work/main/packages/core/src/step-runner.ts:123:45',
      'the password is wrong',
      'AC0123456789abcdef0123456789abcdef',
    ].join('\n');
    expect(redactSecrets(plain)).toBe(plain);
  });

  it('a secret anywhere in any text is gone after redaction', () => {
    const secret = fc.oneof(
      fc.stringMatching(/^[A-Za-z0-9]{8,40}$/).map((s) => `sk_live_${s}`),
      fc.stringMatching(/^[A-Za-z0-9]{8,40}$/).map((s) => `rk_test_${s}`),
      fc
        .tuple(fc.stringMatching(/^[\w-]{8,30}$/), fc.stringMatching(/^[\w-]{8,50}$/))
        .map(([a, b]) => `SG.${a}.${b}`),
    );
    const filler = fc.string({ maxLength: 40 }).map((s) => s.replace(/[\w.]+$/, ''));
    fc.assert(
      fc.property(filler, secret, filler, (before, s, after) => {
        const text = `${before} ${s} ${after}`;
        const out = redactSecrets(text);
        // The secret part (after the kept prefix) never survives.
        expect(out).not.toContain(s.slice(8));
        expect(out).toContain(REDACTED);
      }),
      { seed: SEED, numRuns: 300 },
    );
  });

  describe('in recorded step errors, worker logs and the CLI', () => {
    let db: TestDb;
    let client: Client;
    let worker: Worker;
    const logged: string[] = [];

    const capture: Logger = (() => {
      const make = (bindings: object): Logger => {
        const write = (level: string) => (obj: object, msg?: string) =>
          logged.push(JSON.stringify({ level, ...bindings, ...obj, msg }));
        return {
          debug: write('debug'),
          info: write('info'),
          warn: write('warn'),
          error: write('error'),
          child: (more) => make({ ...bindings, ...more }),
        };
      };
      return make({});
    })();

    const Leaky = newWorkflow('leaky', {
      nodes: {
        charge: {
          action: newAction(
            'leaky_charge',
            async () => {
              throw new Error(leakyMessage());
            },
            { maxAttempts: 2, backoff: () => 0 },
          ),
        },
      },
    });

    beforeAll(async () => {
      db = await createTestDb();
      client = new Client({ connectionString: db.url });
      worker = new Worker({ client, workflows: [Leaky], pollIntervalMs: 50, logger: capture });
      await worker.start();
    });

    afterAll(async () => {
      await worker?.stop({ graceMs: 2_000 });
      await client?.close();
      await db?.drop();
    });

    it('the stored message and stack, the logs and `cyclone run --json` hold no secret', async () => {
      const { runId } = await client.submit(Leaky, {});
      const run = await client.waitForRun(runId, { timeoutMs: 15_000, pollMs: 25 });
      expect(run.state).toBe('failed');
      const errors = run.steps[0]?.errors ?? [];
      expect(errors).toHaveLength(2);
      for (const e of errors) {
        expect(e.message).toContain(`sk_live_${REDACTED}`);
        expect(e.stack).toContain(`Basic ${REDACTED}`);
      }
      let cliOut = '';
      const code = await main(['--database-url', db.url, 'run', runId, '--json'], {
        stdout: { write: (s: string) => (cliOut += s) },
        stderr: { write: () => true },
        env: {},
      });
      expect(code).toBe(0);
      const { rows } = await db.pool.query<{ t: string }>(
        'SELECT errors::text AS t FROM cyclone.cyclone_steps WHERE run_id = $1',
        [runId],
      );
      const everything = [rows[0]?.t ?? '', logged.join('\n'), cliOut].join('\n');
      expect(logged.length).toBeGreaterThan(0);
      for (const [name, value] of Object.entries(SECRETS)) {
        expect(everything, name).not.toContain(value);
      }
    });
  });
});
