/**
 * The operator UI's step and input reads convert a payload to JSON text once: each names the text
 * four times (its byte length, whether it is longer than the preview, the text or its prefix), and
 * a subquery PostgreSQL inlines would convert it for each (a 50 MB output took ~15 s, past the
 * reader's statement timeout). Checked on the plan: EXPLAIN VERBOSE lists every expression each
 * node computes, so the conversion must appear once.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { quoteSchema } from '../src/schema.js';
import { runInputSql, stepDetailSql } from '../src/sql/ui.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
const s = quoteSchema('cyclone');

beforeAll(async () => {
  db = await createTestDb();
});

afterAll(async () => {
  await db?.drop();
});

/** The plan of `text` with parameters `values`, as EXPLAIN VERBOSE prints it. */
async function plan(text: string, values: unknown[]): Promise<string> {
  const c = await db.pool.connect();
  try {
    // A generic plan, as a prepared statement run many times would use.
    await c.query('SET plan_cache_mode = force_generic_plan');
    await c.query(`PREPARE p AS ${text}`);
    const types = values.map(() => 'NULL').join(', ');
    const res = await c.query(`EXPLAIN (VERBOSE, COSTS OFF) EXECUTE p(${types})`);
    await c.query('DEALLOCATE p');
    return res.rows.map((r: { 'QUERY PLAN': string }) => r['QUERY PLAN']).join('\n');
  } finally {
    await c.query('RESET plan_cache_mode').catch(() => {});
    c.release();
  }
}

const count = (text: string, needle: string) => text.split(needle).length - 1;

describe('UI payload reads convert once', () => {
  it('stepDetailSql converts the output to text once', async () => {
    const text = await plan(stepDetailSql(s), [null, null, null, null]);
    expect(count(text, 'output)::text'), text).toBe(1);
  });

  it('runInputSql converts the input to text once', async () => {
    const text = await plan(runInputSql(s), [null, null]);
    expect(count(text, 'input)::text'), text).toBe(1);
  });
});
