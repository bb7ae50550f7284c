/**
 * `pnpm demo` in a short configuration, as a child process on a test database: 60 orders (6 held
 * for approval: 3 approved, 3 left to time out), one worker SIGKILLed mid-step, one dropped
 * response per provider, follow-up e-mails on a timer, the payment reconciliation every few
 * seconds. It must exit 0 and its summary must show every invariant.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Verdict } from '../src/demo/report.js';
import { createTestDb, type TestDb } from './support/db.js';

const appDir = join(dirname(fileURLToPath(import.meta.url)), '..');
let db: TestDb;
let home: string;

beforeAll(async () => {
  db = await createTestDb();
  home = mkdtempSync(join(tmpdir(), 'checkout-demo-')); // its logs go to <home>/.cyclone
});

afterAll(async () => {
  await db?.drop();
  if (home) rmSync(home, { recursive: true, force: true });
});

interface DemoResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** When the verdict's OK line arrived, and when the process exited (ms since the epoch). */
  okAtMs: number | undefined;
  exitedMs: number;
}

function runDemo(args: string[]): Promise<DemoResult> {
  const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: db.url, INIT_CWD: home };
  delete env.NODE_OPTIONS; // vitest's loader flags must not reach the children
  const child = spawn(
    process.execPath,
    ['--conditions=@cyclone/source', '--import', 'tsx', 'src/demo/main.ts', ...args],
    { cwd: appDir, env, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stdout = '';
  let stderr = '';
  let okAtMs: number | undefined;
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    stdout += d;
    if (okAtMs === undefined && stdout.includes('OK: every invariant holds')) okAtMs = Date.now();
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), 100_000);
  return new Promise((resolve) =>
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, okAtMs, exitedMs: Date.now() });
    }),
  );
}

it('runs 60 orders through a worker kill, three lost responses, approvals, timers and a schedule, every invariant holding', async () => {
  const r = await runDemo(['--orders', '60', '--kills', '1', '--json']);
  const why = `stdout:\n${r.stdout}\nstderr:\n${r.stderr.slice(-3000)}`;
  const line = r.stdout.split('\n').find((l) => l.startsWith('SUMMARY '));
  expect(line, why).toBeDefined();
  const summary = JSON.parse((line as string).slice('SUMMARY '.length)) as Verdict;
  expect(
    summary.checks.filter((c) => !c.ok),
    why,
  ).toEqual([]);
  expect(r.code, why).toBe(0);

  const f = summary.figures;
  expect(f).toMatchObject({
    ordersSent: 60,
    ordersAccepted: 60,
    resent: 12,
    resentSameRun: 12,
    runs: 60,
    runsCompleted: 60,
    charges: 60,
    // Orders 7, 27, 47 approved; 17, 37, 57 timed out and refunded.
    held: 6,
    heldApproved: 3,
    heldTimedOut: 3,
    approvalsSent: 3,
    approvalsInTime: 3,
    refunds: 3,
    emails: 117,
    receipts: 60,
    followUps: 57,
    sms: 60,
    shipments: 57,
    duplicates: 0,
    workersKilled: 1,
    responsesDropped: 3,
    unresolvedLedgerKeys: 0,
    // reserve, charge, receipt, sms for each; fulfil and followUp for 57, refund for 3.
    completionTxRows: 60 * 4 + 57 * 2 + 3,
    ordersFulfilled: 57,
    ordersRefunded: 3,
  });
  // Never before its time, by PostgreSQL's clock.
  expect(f.followUpEarliestAfterDueMs).toBeGreaterThanOrEqual(0);
  // The reconciliation fired at every fire time, and its last run matched everything.
  expect(f.reconciliation).toMatchObject({ missing: 0, duplicated: 0, discrepancies: 0 });
  expect(f.reconciliation.runs).toBeGreaterThanOrEqual(1);
  expect(f.reconciliation.runs).toBe(f.reconciliation.fireTimes);
  expect(f.reconciliation.final).toEqual({ charges: 60, refunds: 3, matched: 60, pending: 0 });
  // Exactly what the killed worker still held is run again: no more, no less.
  expect(f.stepsHeldByKilledWorkers).toBeGreaterThanOrEqual(1);
  expect(f.stepsRecoveredFromDeadWorkers).toBe(f.stepsHeldByKilledWorkers);
  expect(f.stepsWithRetries).toBeGreaterThanOrEqual(f.stepsRecoveredFromDeadWorkers);
  expect(new Set(f.unknownOutcomes.map((u) => u.provider))).toEqual(
    new Set(['stripe', 'sendgrid', 'twilio']),
  );
  // The table a person reads.
  expect(r.stdout).toContain('duplicates (must be 0)');
  expect(r.stdout).toContain('OK: every invariant holds');
  // Each provider's lost response announced once, under its own name.
  for (const provider of ['Stripe', 'SendGrid', 'Twilio']) {
    const said = r.stdout.split('\n').filter((l) => l.startsWith(`demo: ${provider} dropped`));
    expect(said, why).toHaveLength(1);
  }
  // It ends right after the verdict (the API and the workers were stopped while it was counted).
  expect(r.exitedMs - (r.okAtMs ?? Number.NaN), why).toBeLessThan(2_000);
});
