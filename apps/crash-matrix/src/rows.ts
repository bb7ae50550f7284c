/**
 * The five rows of the crash matrix (docs/design/ARCHITECTURE.md § The crash matrix), each
 * played with real worker processes: worker A is the victim (SIGKILLed at a precise point of
 * the step, or stalled past its lease), worker B a fresh process that must recover the step as
 * the design promises. Each row returns what it expected and what it observed.
 */
import { rmSync, writeFileSync } from 'node:fs';
import type { Client } from '@cyclone/core';
import type pg from 'pg';
import {
  dbNow,
  keyedEffects,
  rowsOf,
  runState,
  type StepRow,
  step,
  until,
  WorkerProcess,
} from './harness.js';
import { OneStep, releaseFile, TwoSteps } from './workflows.js';

export interface Check {
  what: string;
  expected: string;
  observed: string;
  ok: boolean;
}

export interface RowResult {
  row: number;
  /** The row of the matrix, e.g. "the worker stops before the side effect". */
  title: string;
  /** What was done, in order. */
  story: string[];
  checks: Check[];
}

export interface Env {
  databaseUrl: string;
  /** A plain pool on the database, for reading. */
  pool: pg.Pool;
  /** A client of the crash matrix's Cyclone schema, for submitting. */
  client: Client;
}

const check = (what: string, expected: string, observed: string, ok: boolean): Check => ({
  what,
  expected,
  observed,
  ok,
});

/** Names workers and pids by their label (A, B) in what we print. */
function namer(...workers: WorkerProcess[]) {
  const byId = (id: string | null | undefined) =>
    workers.find((w) => w.workerId === id)?.label ?? (id ? `worker ${id}` : 'nobody');
  const byPid = (pid: number | undefined) =>
    workers.find((w) => w.pid === pid)?.label ?? `pid ${pid}`;
  const rows = (rs: { attempt: number; pid: number }[]) =>
    rs.length === 0
      ? 'none'
      : `${rs.length}: ${rs.map((r) => `attempt ${r.attempt} by ${byPid(r.pid)}`).join(', ')}`;
  const state = (s: StepRow) =>
    `${s.state}, attempt ${s.attempt}${s.state === 'running' ? `, leased by ${byId(s.lease_owner)}` : ''}`;
  return { byId, byPid, rows, state };
}

const errorsOf = (s: StepRow) =>
  s.errors.length === 0
    ? 'none'
    : s.errors.map((e) => `attempt ${e.attempt}: ${e.kind}`).join(', ');
const onlyLeaseExpired = (s: StepRow) =>
  s.errors.length === 1 && s.errors[0]?.attempt === 1 && s.errors[0]?.kind === 'lease_expired';
const finished = (s: StepRow) => s.state === 'completed' || s.state === 'discarded';
const ms = (n: number) => `${Math.round(n)} ms`;

/** Row 1: the worker stops before the side effect. */
export async function beforeTheEffect(e: Env): Promise<RowResult> {
  const { runId } = await OneStep.submit(e.client, { scenario: 'before_effect' });
  const a = await WorkerProcess.start('A', e.databaseUrl, true);
  await a.line(new RegExp(`^BEFORE_EFFECT ${runId} step 1$`));
  const signal = await a.kill();
  const left = await step(e.pool, runId, 'step');
  const b = await WorkerProcess.start('B', e.databaseUrl, false);
  const done = await until('the step to finish', () => step(e.pool, runId, 'step'), finished);
  const n = namer(a, b);
  const inv = await rowsOf(e.pool, 'invocations', runId, 'step');
  const raw = await rowsOf(e.pool, 'effects_raw', runId, 'step');
  const biz = await rowsOf(e.pool, 'business', runId, 'step');
  const rerunAt = inv[1]?.at?.getTime() ?? Number.NaN;
  const leaseEnd = left.lease_expires_at?.getTime() ?? Number.NaN;
  return {
    row: 1,
    title: 'the worker stops before the side effect',
    story: [
      `${a} claimed the step and stopped before its side effect; SIGKILL (${signal})`,
      `${b} started`,
    ],
    checks: [
      check(
        'after the kill',
        'running, attempt 1, leased by A until the lease expires',
        n.state(left),
        left.state === 'running' && left.attempt === 1 && left.lease_owner === a.workerId,
      ),
      check(
        'afterwards',
        'swept after the lease expired and run again: completed, attempt 2, by B',
        `${done.state}, attempt ${done.attempt}, by ${n.byPid(done.output?.pid)}; re-run ${ms(rerunAt - leaseEnd)} after the lease expired`,
        done.state === 'completed' &&
          done.attempt === 2 &&
          done.output?.pid === b.pid &&
          rerunAt >= leaseEnd,
      ),
      check('errors recorded', 'attempt 1: lease_expired', errorsOf(done), onlyLeaseExpired(done)),
      check(
        'the side effect',
        '1: attempt 2 by B (attempt 1 never got there)',
        n.rows(raw),
        raw.length === 1 && raw[0]?.attempt === 2 && raw[0]?.pid === b.pid,
      ),
      check(
        'completionTx rows',
        '1: attempt 2 by B',
        n.rows(biz),
        biz.length === 1 && biz[0]?.attempt === 2 && biz[0]?.pid === b.pid,
      ),
    ],
  };
}

/** Row 2: the worker stops after an external side effect, before the completion commit. */
export async function afterTheEffect(e: Env): Promise<RowResult> {
  const { runId } = await OneStep.submit(e.client, { scenario: 'after_effect' });
  const a = await WorkerProcess.start('A', e.databaseUrl, true);
  await a.line(new RegExp(`^AFTER_EFFECT ${runId} step 1$`));
  const rawBefore = await rowsOf(e.pool, 'effects_raw', runId, 'step');
  const bizBefore = await rowsOf(e.pool, 'business', runId, 'step');
  const signal = await a.kill();
  const left = await step(e.pool, runId, 'step');
  const b = await WorkerProcess.start('B', e.databaseUrl, false);
  const done = await until('the step to finish', () => step(e.pool, runId, 'step'), finished);
  const n = namer(a, b);
  const raw = await rowsOf(e.pool, 'effects_raw', runId, 'step');
  const keyed = await keyedEffects(e.pool, runId, 'step');
  const biz = await rowsOf(e.pool, 'business', runId, 'step');
  return {
    row: 2,
    title: 'the worker stops after an external side effect, before the completion commit',
    story: [
      `${a} wrote its business row on completionTx (not committed), made the external effect, and stopped before the completion; SIGKILL (${signal})`,
      `${b} started`,
    ],
    checks: [
      check(
        'before the kill',
        'the external effect is there (attempt 1); the completionTx row is not (its transaction is open)',
        `effect ${n.rows(rawBefore)}; completionTx rows ${n.rows(bizBefore)}`,
        rawBefore.length === 1 && bizBefore.length === 0,
      ),
      check(
        'after the kill',
        'running, attempt 1, until the lease expires',
        n.state(left),
        left.state === 'running' && left.attempt === 1,
      ),
      check(
        'afterwards',
        'reclaimed and run again: completed, attempt 2, by B',
        `${done.state}, attempt ${done.attempt}, by ${n.byPid(done.output?.pid)}`,
        done.state === 'completed' && done.attempt === 2 && done.output?.pid === b.pid,
      ),
      check('errors recorded', 'attempt 1: lease_expired', errorsOf(done), onlyLeaseExpired(done)),
      check(
        'the side effect, raw',
        '2: it happened again outside Postgres (at least once)',
        n.rows(raw),
        raw.length === 2,
      ),
      check(
        'the side effect, keyed by (runId, node)',
        '1: the key removed the duplicate (attempt 1 by A)',
        n.rows(keyed),
        keyed.length === 1 && keyed[0]?.attempt === 1 && keyed[0]?.pid === a.pid,
      ),
      check(
        'completionTx rows',
        '1: attempt 2 by B (A’s rolled back with its connection)',
        n.rows(biz),
        biz.length === 1 && biz[0]?.attempt === 2 && biz[0]?.pid === b.pid,
      ),
    ],
  };
}

/** Row 3: the worker stops after the completion commit. */
export async function afterTheCommit(e: Env): Promise<RowResult> {
  const { runId } = await TwoSteps.submit(e.client, { scenario: 'after_commit' });
  const a = await WorkerProcess.start('A', e.databaseUrl, true);
  await a.line(new RegExp(`^HOLDING ${runId} second 1$`));
  const firstBefore = await step(e.pool, runId, 'first');
  const signal = await a.kill();
  const b = await WorkerProcess.start('B', e.databaseUrl, false);
  const state = await until(
    'the run to finish',
    () => runState(e.pool, runId),
    (s) => s !== 'running',
  );
  const n = namer(a, b);
  const first = await step(e.pool, runId, 'first');
  const second = await step(e.pool, runId, 'second');
  const inv = await rowsOf(e.pool, 'invocations', runId, 'first');
  const biz = await rowsOf(e.pool, 'business', runId, 'first');
  const raw = await rowsOf(e.pool, 'effects_raw', runId, 'first');
  return {
    row: 3,
    title: 'the worker stops after the completion commit',
    story: [
      `${a} completed node first (committed) and stopped inside node second; SIGKILL (${signal})`,
      `${b} started`,
    ],
    checks: [
      check(
        'node first when A died',
        'completed, attempt 1, by A',
        `${firstBefore.state}, attempt ${firstBefore.attempt}, by ${n.byPid(firstBefore.output?.pid)}`,
        firstBefore.state === 'completed' &&
          firstBefore.attempt === 1 &&
          firstBefore.output?.pid === a.pid,
      ),
      check(
        'node first afterwards',
        'untouched: never run again (1 invocation), no error',
        `${first.state}, attempt ${first.attempt}, ${inv.length} invocation(s), errors ${errorsOf(first)}`,
        first.state === 'completed' &&
          first.attempt === 1 &&
          inv.length === 1 &&
          first.errors.length === 0,
      ),
      check(
        'node first’s effects',
        'completionTx row 1 and side effect 1, both attempt 1 by A',
        `completionTx ${n.rows(biz)}; side effect ${n.rows(raw)}`,
        biz.length === 1 && raw.length === 1 && biz[0]?.pid === a.pid && raw[0]?.pid === a.pid,
      ),
      check(
        'node second and the run',
        'second recovered (attempt 2 by B); the run completed',
        `second ${second.state}, attempt ${second.attempt}, by ${n.byPid(second.output?.pid)}; run ${state}`,
        second.state === 'completed' &&
          second.attempt === 2 &&
          second.output?.pid === b.pid &&
          state === 'completed',
      ),
    ],
  };
}

/** Row 4: the worker is alive but stalled, and its lease expires. */
export async function stalledWorker(e: Env): Promise<RowResult> {
  const { runId } = await OneStep.submit(e.client, { scenario: 'stall' });
  const goA = releaseFile(runId, 'a');
  const goB = releaseFile(runId, 'b');
  try {
    const a = await WorkerProcess.start('A', e.databaseUrl, true);
    await a.line(new RegExp(`^STALLED ${runId} step 1$`));
    const stalledAt = await dbNow(e.pool);
    // A's event loop is blocked: no heartbeat. B's sweep finds the lease expired, B runs it.
    const b = await WorkerProcess.start('B', e.databaseUrl, false);
    await b.line(new RegExp(`^WAITING ${runId} step 2$`));
    const n = namer(a, b);
    const taken = await step(e.pool, runId, 'step');
    const takenAfter = (await rowsOf(e.pool, 'invocations', runId, 'step'))[1]?.at;
    // A wakes up while B holds attempt 2 and tries to complete attempt 1 at once.
    writeFileSync(goA, '');
    await a.line(new RegExp(`^RESUMED ${runId} step 1$`));
    a.proc.kill('SIGTERM'); // a graceful stop waits for A's in-flight completion to be settled
    await a.line(/^STOPPED$/);
    const afterA = await step(e.pool, runId, 'step');
    const bizAfterA = await rowsOf(e.pool, 'business', runId, 'step');
    writeFileSync(goB, '');
    const done = await until('the step to finish', () => step(e.pool, runId, 'step'), finished);
    const biz = await rowsOf(e.pool, 'business', runId, 'step');
    const raw = await rowsOf(e.pool, 'effects_raw', runId, 'step');
    const keyed = await keyedEffects(e.pool, runId, 'step');
    const fenced = /completion fenced out/i.test(a.stderr);
    return {
      row: 4,
      title: 'the worker never stops: it is alive but stalled, and its lease expires',
      story: [
        `${a} made the side effect, then blocked its own event loop (no heartbeats)`,
        `${b} started; released A once B held the step; SIGTERM to A after it tried to complete`,
      ],
      checks: [
        check(
          'while A stalls',
          'claimable after the sweep: B runs it as attempt 2',
          `${n.state(taken)}; ${takenAfter ? `${ms(takenAfter.getTime() - stalledAt.getTime())} after A stalled` : ''}`,
          taken.state === 'running' && taken.attempt === 2 && taken.lease_owner === b.workerId,
        ),
        check(
          'A’s late completion',
          'fenced out: the step stays B’s, A’s completionTx row rolled back',
          `${n.state(afterA)}; completionTx rows ${n.rows(bizAfterA)}; A logged "completion fenced out": ${fenced ? 'yes' : 'no'}`,
          afterA.state === 'running' &&
            afterA.attempt === 2 &&
            afterA.lease_owner === b.workerId &&
            bizAfterA.length === 0,
        ),
        check(
          'afterwards',
          'completed, attempt 2, by B',
          `${done.state}, attempt ${done.attempt}, by ${n.byPid(done.output?.pid)}`,
          done.state === 'completed' && done.attempt === 2 && done.output?.pid === b.pid,
        ),
        check(
          'completionTx rows',
          '1: attempt 2 by B',
          n.rows(biz),
          biz.length === 1 && biz[0]?.attempt === 2 && biz[0]?.pid === b.pid,
        ),
        check(
          'the side effect',
          '2 raw (A’s and B’s); 1 once keyed by (runId, node)',
          `raw ${n.rows(raw)}; keyed ${n.rows(keyed)}`,
          raw.length === 2 && keyed.length === 1,
        ),
      ],
    };
  } finally {
    rmSync(goA, { force: true });
    rmSync(goB, { force: true });
  }
}

/** Row 5: the handler throws. */
export async function handlerThrows(e: Env): Promise<RowResult> {
  const { runId } = await OneStep.submit(e.client, { scenario: 'throw' });
  const w = await WorkerProcess.start('W', e.databaseUrl, false);
  const failed = await until(
    'the first attempt to fail',
    () => step(e.pool, runId, 'step'),
    (s) => s.state !== 'available' && s.state !== 'running',
  );
  const bizAfterThrow = await rowsOf(e.pool, 'business', runId, 'step');
  const done = await until('the step to finish', () => step(e.pool, runId, 'step'), finished);
  const n = namer(w);
  const inv = await rowsOf(e.pool, 'invocations', runId, 'step');
  const biz = await rowsOf(e.pool, 'business', runId, 'step');
  const gap = (inv[1]?.at?.getTime() ?? 0) - (inv[0]?.at?.getTime() ?? 0);
  return {
    row: 5,
    title: 'the handler throws (or rejects)',
    story: [`${w} ran attempt 1, which wrote on completionTx and then threw`],
    checks: [
      check(
        'after the throw',
        'retryable, attempt 1; nothing on completionTx',
        `${n.state(failed)}; completionTx rows ${n.rows(bizAfterThrow)}`,
        failed.state === 'retryable' && failed.attempt === 1 && bizAfterThrow.length === 0,
      ),
      check(
        'afterwards',
        'attempt 2 after the 1 s backoff: completed',
        `${done.state}, attempt ${done.attempt}; attempt 2 began ${ms(gap)} after attempt 1`,
        done.state === 'completed' && done.attempt === 2 && gap >= 1_000,
      ),
      check(
        'errors recorded',
        'attempt 1: error (the thrown message)',
        errorsOf(done),
        done.errors.length === 1 &&
          done.errors[0]?.kind === 'error' &&
          /throws after its completionTx write/.test(done.errors[0]?.message ?? ''),
      ),
      check(
        'completionTx rows',
        '1: attempt 2',
        n.rows(biz),
        biz.length === 1 && biz[0]?.attempt === 2,
      ),
    ],
  };
}

/** The rows in the order of the matrix. */
export const ROWS = [beforeTheEffect, afterTheEffect, afterTheCommit, stalledWorker, handlerThrows];
