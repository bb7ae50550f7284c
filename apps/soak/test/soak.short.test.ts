/**
 * The short soak of CI: the real `pnpm soak` program as a child process, for 20 s of faults of
 * every kind (SIGKILLed and stalled workers, terminated connections, a PostgreSQL restart,
 * provider faults, a failover to the synchronous standby, a worker's host cut off by a network
 * partition) on its own servers (a primary and its standby, or the embedded PostgreSQL where the
 * server binaries for a standby are missing), then
 * the settle period and the invariant check. Every invariant must hold: nothing lost, nothing
 * stuck, no second completionTx row, no second provider effect, every unknown outcome ended,
 * every orphaned step ran again.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Report } from '../src/checker.js';
import { failoverUnavailable } from '../src/failover.js';
import { partitionUnavailable } from '../src/partition.js';

const APP_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');
let out: string;
/** The soak's process while it runs: interrupted (it cleans up) if the test times out. */
let running: ReturnType<typeof spawn> | undefined;

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), 'cyclone-soak-test-'));
});

afterAll(async () => {
  if (running && running.exitCode === null) {
    running.kill('SIGINT');
    await new Promise((r) => running?.once('close', r));
  }
  if (out) await rm(out, { recursive: true, force: true });
});

function soak(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((res, rej) => {
    const env = { ...process.env };
    delete env.NODE_OPTIONS; // vitest's loader flags must not leak into the child
    const child = spawn(
      process.execPath,
      ['--conditions=@cyclone/source', '--import', 'tsx', 'src/main.ts', ...args],
      { cwd: APP_DIR, env, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    running = child;
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    child.on('error', rej);
    child.on('close', (code) => res({ code, stdout, stderr }));
  });
}

it('a 20 s soak with every fault kind loses nothing and duplicates nothing', async () => {
  const r = await soak([
    '--duration',
    '20s',
    '--settle',
    '60s',
    '--workers',
    '3',
    '--rate',
    '5',
    '--fault-every',
    '1s',
    '--pg-restart-every',
    '20s',
    '--seed',
    '20261130',
    '--out',
    out,
    '--json',
  ]);
  const report = JSON.parse(await readFile(join(out, 'report.json'), 'utf8')) as Report;
  const failedInvariants = report.invariants.filter((i) => !i.ok);
  expect(failedInvariants, `${r.stderr.slice(-3000)}`).toEqual([]);
  expect(r.code).toBe(0);
  expect(report.ok).toBe(true);
  // Every kind this machine can run: failover needs PostgreSQL's server binaries.
  if (!failoverUnavailable()) expect(report.config.faults).toContain('failover');
  // And a partition needs root and network namespaces (CI has both).
  if (!partitionUnavailable()) expect(report.config.faults).toContain('partition');
  for (const kind of report.config.faults) {
    expect(report.faults.byKind[kind] ?? 0).toBeGreaterThan(0);
  }
  expect(report.runs.submitted).toBeGreaterThan(40);
  expect(report.runs).toMatchObject({ lost: 0, stuck: 0, failedUnexpectedly: 0 });
  expect(report.effects.duplicateKeys).toBe(0);
  console.log(
    `soak: ${report.runs.submitted} runs (${report.runs.completed} completed, ${report.runs.failedByDesign} declined by design), ` +
      `faults ${JSON.stringify(report.faults.byKind)}, ${report.unknownOutcomes.total} unknown outcomes ended, ` +
      `max recovery after a kill ${report.recovery.afterKill.max ?? '-'} ms, ${report.effects.totalEffects} provider effects, 0 twice`,
  );
});
