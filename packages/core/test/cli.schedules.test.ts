/**
 * The `cyclone` CLI's schedule commands, in-process against a worker carrying a schedule:
 * `schedules [--json]`, `schedule pause|resume|trigger <name>`; exit 0 on success, 1 with one
 * line on stderr for an unknown schedule, 2 on bad usage.
 */
import { waitFor } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../src/cli.js';
import { Client, newAction, newSchedule, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;
let worker: Worker | undefined;

const Yearly = newWorkflow('cli_yearly', {
  nodes: { a: { action: newAction('cli_yearly_step', () => null) } },
});
const NewYear = newSchedule('new-year', {
  cron: '0 0 1 1 *',
  timezone: 'Europe/Paris',
  workflow: Yearly,
  input: (fireAt) => ({ at: fireAt.toISOString() }),
});

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

async function cli(...args: string[]): Promise<Result> {
  let stdout = '';
  let stderr = '';
  const code = await main(['--database-url', db.url, ...args], {
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s) },
    env: {},
  });
  return { code, stdout, stderr };
}

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 2 });
});

afterAll(async () => {
  await worker?.stop({ graceMs: 1_000 });
  await client?.close();
  await db?.drop();
});

describe('cyclone schedules / schedule', () => {
  it('lists nothing before a worker registered a schedule', async () => {
    const r = await cli('schedules');
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(r.stdout).toMatch(/^no schedules/);
    expect(JSON.parse((await cli('schedules', '--json')).stdout)).toEqual([]);
  });

  it('lists, pauses, resumes and triggers a carried schedule', async () => {
    worker = new Worker({ client, workflows: [Yearly], schedules: [NewYear] });
    await worker.start();

    let r = await cli('schedules');
    expect(r.code).toBe(0);
    const [header, row] = r.stdout.trimEnd().split('\n');
    expect(header).toMatch(/^NAME\s+CRON\s+TIMEZONE\s+WORKFLOW\s+STATE\s+LAST FIRE\s+NEXT FIRE$/);
    expect(row).toMatch(
      /^new-year\s+0 0 1 1 \*\s+Europe\/Paris\s+cli_yearly\s+active\s+-\s+\d{4}-/,
    );

    const listed = JSON.parse((await cli('schedules', '--json')).stdout);
    expect(listed).toHaveLength(1);
    expect(listed[0]).toMatchObject({ name: 'new-year', carried: true, paused: false });

    r = await cli('schedule', 'pause', 'new-year');
    expect(r).toEqual({ code: 0, stdout: 'paused schedule new-year\n', stderr: '' });
    expect((await cli('schedules')).stdout).toMatch(/new-year .* paused /);
    expect((await client.listSchedules())[0]?.paused).toBe(true);

    r = await cli('schedule', 'resume', 'new-year');
    expect(r).toEqual({ code: 0, stdout: 'resumed schedule new-year\n', stderr: '' });
    expect((await client.listSchedules())[0]?.paused).toBe(false);

    r = await cli('schedule', 'trigger', 'new-year');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      /^triggered schedule new-year at \d{4}-\d\d-\d\dT[\d:.]+Z: a worker carrying it makes the run now\n$/,
    );
    const runs = await waitFor('the triggered run', async () => {
      const all = await client.listRuns({ workflow: 'cli_yearly' });
      return all.length === 1 ? all : undefined;
    });
    expect(runs[0]?.submitKey).toMatch(/^schedule:new-year:trigger:/);
  });

  it('says when no worker carries the schedule', async () => {
    await worker?.stop({ graceMs: 1_000 });
    worker = undefined;
    await db.pool.query(
      `UPDATE cyclone.cyclone_schedules SET last_seen_at = now() - interval '2 minutes'`,
    );
    expect((await cli('schedules')).stdout).toMatch(/new-year .* not carried /);
    const r = await cli('schedule', 'trigger', 'new-year');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/no worker carries it now; the run is made once one does\n$/);
    expect((await cli('schedules')).stdout).toMatch(/not carried, trigger waiting/);
  });

  it('exit 1 with one line for an unknown schedule; exit 2 on bad usage', async () => {
    for (const op of ['pause', 'resume', 'trigger']) {
      const r = await cli('schedule', op, 'no-such');
      expect(r).toEqual({ code: 1, stdout: '', stderr: "cyclone: schedule 'no-such' not found\n" });
    }
    for (const args of [
      ['schedule'],
      ['schedule', 'pause'],
      ['schedule', 'frob', 'new-year'],
      ['schedule', 'pause', 'a', 'b'],
      ['schedules', 'extra'],
      ['schedules', '--limit', '3'],
    ]) {
      const r = await cli(...args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr, args.join(' ')).not.toMatch(/\n\s+at /);
    }
  });
});
