/**
 * `StepInfo.after`: `getRun` gives each step its direct upstream nodes, read back from the stored
 * DAG (not from the workflow in memory), sorted by name, for runs made by `submit` and by
 * `submitMany` alike.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, type RunInfo } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const noop = newAction('after_noop', async () => null);
/** A diamond with a tail, its `after` lists given out of name order. */
const Dag = newWorkflow('after_dag', {
  nodes: {
    root: { action: noop },
    right: { action: noop, after: ['root'] },
    left: { action: noop, after: ['root'] },
    join: { action: noop, after: ['right', 'left'] },
    tail: { action: noop, after: ['join', 'root'] },
  },
});

const afterByNode = (run: RunInfo) => Object.fromEntries(run.steps.map((s) => [s.node, s.after]));

describe('StepInfo.after', () => {
  let db: TestDb;
  let client: Client;

  beforeAll(async () => {
    db = await createTestDb();
    client = new Client({ connectionString: db.url, poolSize: 2 });
  });

  afterAll(async () => {
    await client?.close();
    await db?.drop();
  });

  it('lists each node’s direct upstream nodes, sorted, for submit and submitMany', async () => {
    const expected = {
      root: [],
      left: ['root'],
      right: ['root'],
      join: ['left', 'right'],
      tail: ['join', 'root'],
    };
    const { runId } = await client.submit(Dag, {});
    expect(afterByNode(await client.getRun(runId))).toEqual(expected);
    const { runIds } = await client.submitMany(Dag, [{}, {}]);
    for (const id of runIds) expect(afterByNode(await client.getRun(id))).toEqual(expected);
  });
});
