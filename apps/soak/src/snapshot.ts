/**
 * Everything the checker looks at, read once at the end of the soak: the database (runs, steps
 * with the class of each recorded error, business rows, ledger rows), the fakes' effects per
 * key, a search for the providers' secrets in stored text and in the worker logs, and the
 * orchestrator's journal. Plain data, so that `check` (checker.ts) is a pure function.
 */
import { readFile } from 'node:fs/promises';
import type pg from 'pg';
import type { Credentials, Fakes } from './fakes.js';
import type { Fleet, UnexpectedExit } from './fleet.js';
import type {
  FaultRecord,
  Journal,
  Loss,
  OperatorAction,
  StartEvent,
  SubmittedRun,
} from './journal.js';
import type { SoakOptions } from './options.js';
import type { Provider } from './workload.js';

export interface RunRow {
  id: string;
  workflow: string;
  state: string;
  submitKey: string | null;
}

export interface StepRow {
  runId: string;
  node: string;
  state: string;
  attempt: number;
  /** Per recorded error, oldest first: the error's class (from its stack), else its kind. */
  errorClasses: string[];
}

export interface LedgerRow {
  runId: string;
  key: string;
  node: string;
  phase: string;
  calls: number;
  generation: number;
  errorOutcome: string | null;
  errorCode: string | null;
}

/** A fault as reported: provider faults with the requests they hit. */
export type FaultSummary =
  | Exclude<FaultRecord, { kind: 'provider' }>
  | (Omit<Extract<FaultRecord, { kind: 'provider' }>, 'hits'> & { hits: number });

export interface Snapshot {
  options: Omit<SoakOptions, 'json'>;
  startedAt: number;
  /** When submissions and faults stopped, and when the settle period ended. */
  faultPhaseEndedAt: number;
  endedAt: number;
  asked: number;
  submitRetries: number;
  submitted: SubmittedRun[];
  runs: RunRow[];
  steps: StepRow[];
  business: { runId: string; node: string; rows: number }[];
  ledger: LedgerRow[];
  effects: { key: string; provider: Provider; effects: number; requests: number }[];
  faults: FaultSummary[];
  losses: Loss[];
  starts: Record<string, StartEvent[]>;
  operator: OperatorAction[];
  leftAlone: Record<string, string>;
  unexpectedExits: UnexpectedExit[];
  workerProcesses: number;
  webhookFailures: number;
  /** Where a provider secret was found (table/file and count); empty when nowhere. */
  secrets: { where: string; secret: string; count: number }[];
}

export interface SnapshotInput {
  pool: pg.Pool;
  fakes: Fakes;
  fleet: Fleet;
  journal: Journal;
  options: SoakOptions;
  asked: number;
  leftAlone: Map<string, string>;
  startedAt: number;
  faultPhaseEndedAt: number;
}

/**
 * Reads the snapshot in one REPEATABLE READ transaction, so that every table is seen at one
 * moment: a worker's last COMMIT can still land while it reads (one sent just before the stop's
 * SIGKILL, or waiting for a synchronous standby), and two separate reads would see its step
 * still running but its completionTx row already there.
 */
export async function takeSnapshot(i: SnapshotInput): Promise<Snapshot> {
  const c = await i.pool.connect();
  try {
    await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const snapshot = await readSnapshot(c, i);
    await c.query('COMMIT');
    c.release();
    return snapshot;
  } catch (err) {
    c.release(err as Error);
    throw err;
  }
}

async function readSnapshot(pool: pg.PoolClient, i: SnapshotInput): Promise<Snapshot> {
  const runs = await pool.query<RunRow>(
    `SELECT id, workflow, state, submit_key AS "submitKey" FROM cyclone.cyclone_runs`,
  );
  const steps = await pool.query<StepRow>(
    `SELECT run_id AS "runId", node, state, attempt,
            ARRAY(SELECT coalesce(nullif(split_part(e ->> 'stack', ':', 1), ''), e ->> 'kind')
                  FROM jsonb_array_elements(errors) WITH ORDINALITY AS x(e, n) ORDER BY n)
              AS "errorClasses"
     FROM cyclone.cyclone_steps`,
  );
  const business = await pool.query<{ runId: string; node: string; rows: number }>(
    `SELECT run_id AS "runId", node, count(*)::int AS rows FROM soak_business GROUP BY 1, 2`,
  );
  const ledger = await pool.query<LedgerRow>(
    `SELECT run_id AS "runId", key, node, phase, calls, generation,
            error ->> 'outcome' AS "errorOutcome", error ->> 'code' AS "errorCode"
     FROM cyclone.cyclone_idempotency`,
  );

  const { credentials } = i.fakes;
  const secrets: Snapshot['secrets'] = [];
  const named = secretList(credentials);
  for (const [name, value] of named) {
    const { rows } = await pool.query<{ steps: number; ledger: number; runs: number }>(
      `SELECT
         (SELECT count(*)::int FROM cyclone.cyclone_steps
          WHERE strpos(errors::text, $1) > 0 OR strpos(coalesce(output::text, ''), $1) > 0) AS steps,
         (SELECT count(*)::int FROM cyclone.cyclone_idempotency
          WHERE strpos(coalesce(error::text, '') || coalesce(result::text, ''), $1) > 0) AS ledger,
         (SELECT count(*)::int FROM cyclone.cyclone_runs WHERE strpos(input::text, $1) > 0) AS runs`,
      [value],
    );
    const r = rows[0];
    if (r?.steps)
      secrets.push({ where: 'cyclone_steps (errors, output)', secret: name, count: r.steps });
    if (r?.ledger)
      secrets.push({ where: 'cyclone_idempotency (error, result)', secret: name, count: r.ledger });
    if (r?.runs) secrets.push({ where: 'cyclone_runs (input)', secret: name, count: r.runs });
  }
  for (const w of i.fleet.processes()) {
    let text = '';
    try {
      text = await readFile(w.logFile, 'utf8');
    } catch {
      continue;
    }
    for (const [name, value] of named) {
      const n = text.split(value).length - 1;
      if (n > 0) secrets.push({ where: w.logFile, secret: name, count: n });
    }
  }

  return {
    options: { ...i.options },
    startedAt: i.startedAt,
    faultPhaseEndedAt: i.faultPhaseEndedAt,
    endedAt: Date.now(),
    asked: i.asked,
    submitRetries: i.journal.submitRetries,
    submitted: [...i.journal.submitted.values()],
    runs: runs.rows,
    steps: steps.rows,
    business: business.rows,
    ledger: ledger.rows,
    effects: [...i.fakes.effectsByKey()].map(([key, v]) => ({ key, ...v })),
    faults: i.journal.faults.map((f) => (f.kind === 'provider' ? { ...f, hits: f.hits() } : f)),
    losses: i.journal.losses,
    starts: Object.fromEntries(i.journal.starts),
    operator: i.journal.operator,
    leftAlone: Object.fromEntries(i.leftAlone),
    unexpectedExits: i.fleet.unexpectedExits,
    workerProcesses: i.fleet.processes().length,
    webhookFailures: i.fakes.webhookFailures,
    secrets,
  };
}

/** The secrets to look for: each credential, and its secret part where it has a public one. */
function secretList(c: Credentials): [string, string][] {
  return [
    ['stripe secret key', c.stripeKey],
    ['sendgrid api key', c.sendgridKey],
    ['twilio auth token', c.twilioToken],
    ['twilio basic credential', Buffer.from(`${c.twilioSid}:${c.twilioToken}`).toString('base64')],
  ];
}
