/**
 * The checker on hand-made snapshots: a clean one passes, and each kind of damage a soak exists
 * to find (a lost or stuck run, a second completionTx row, a second provider effect, an unknown
 * outcome left open, a dead worker's step never re-run, a leaked secret) fails its invariant.
 * And the options: bad usage is refused with a message.
 */
import { describe, expect, it } from 'vitest';
import { check } from '../src/checker.js';
import { parseDuration, parseOptions, UsageError } from '../src/options.js';
import { partitionUnavailable } from '../src/partition.js';
import type { Snapshot } from '../src/snapshot.js';

const RUN = '11111111-1111-4111-8111-111111111111';
const NODES = ['reserve', 'charge', 'email', 'sms', 'ship'];

function clean(): Snapshot {
  const options = parseOptions(['--duration', '10s', '--seed', '1', '--faults', 'kill']);
  if (options === 'help') throw new Error('unreachable');
  return {
    options,
    startedAt: 0,
    faultPhaseEndedAt: 10_000,
    endedAt: 12_000,
    asked: 1,
    submitRetries: 0,
    submitted: [{ key: 'soak-0', runId: RUN, workflow: 'soak_order', declined: false, at: 1 }],
    runs: [{ id: RUN, workflow: 'soak_order', state: 'completed', submitKey: 'soak-0' }],
    steps: NODES.map((node) => ({
      runId: RUN,
      node,
      state: 'completed',
      attempt: 1,
      errorClasses: [],
    })),
    business: NODES.map((node) => ({ runId: RUN, node, rows: 1 })),
    ledger: ['charge', 'email', 'sms'].map((node) => ({
      runId: RUN,
      key: `${RUN}:${node}`,
      node,
      phase: 'succeeded',
      calls: 1,
      generation: 0,
      errorOutcome: null,
      errorCode: null,
    })),
    effects: [
      { key: `${RUN}:charge`, provider: 'stripe', effects: 1, requests: 1 },
      { key: `${RUN}:email`, provider: 'sendgrid', effects: 1, requests: 1 },
      { key: `${RUN}:sms`, provider: 'twilio', effects: 1, requests: 1 },
    ],
    faults: [{ kind: 'kill', at: 5_000, slot: 0, workerId: 'w0', orphans: 1 }],
    losses: [
      {
        cause: 'kill',
        workerId: 'w0',
        at: 5_000,
        orphans: [{ runId: RUN, node: 'ship', attempt: 1 }],
      },
    ],
    starts: { [`${RUN}:ship`]: [{ attempt: 2, at: 8_200, workerId: 'w1' }] },
    operator: [],
    leftAlone: {},
    unexpectedExits: [],
    workerProcesses: 2,
    webhookFailures: 0,
    secrets: [],
  };
}

function failed(s: Snapshot): string[] {
  return check(s)
    .invariants.filter((i) => !i.ok)
    .map((i) => i.name);
}

describe('the invariant checker', () => {
  it('passes a clean soak and measures the recovery', () => {
    const r = check(clean());
    expect(failed(clean())).toEqual([]);
    expect(r.ok).toBe(true);
    expect(r.recovery.afterKill).toMatchObject({ orphans: 1, count: 1, max: 3_200 });
    expect(r.runs).toMatchObject({ submitted: 1, completed: 1, lost: 0, stuck: 0 });
  });

  it('a confirmed run missing from the database is lost', () => {
    const s = clean();
    s.runs = [];
    s.steps = [];
    s.business = [];
    s.effects = [];
    expect(failed(s)).toContain('no run lost (every confirmed submission exists)');
  });

  it('a run still running after the settle period is stuck', () => {
    const s = clean();
    (s.runs[0] as { state: string }).state = 'running';
    expect(failed(s)).toContain('no run stuck (all terminal after the settle period)');
  });

  it('a second completionTx row, or a row of a node that did not complete, fails', () => {
    const twice = clean();
    (twice.business[0] as { rows: number }).rows = 2;
    expect(failed(twice)).toEqual(['completionTx rows: exactly 1 per completed node, 0 otherwise']);
    const notCompleted = clean();
    (notCompleted.steps[4] as { state: string }).state = 'discarded';
    expect(failed(notCompleted)).toContain(
      'completionTx rows: exactly 1 per completed node, 0 otherwise',
    );
  });

  it('a second effect under one key, or none for a completed node, fails', () => {
    const dup = clean();
    (dup.effects[1] as { effects: number }).effects = 2;
    expect(failed(dup)).toEqual(
      expect.arrayContaining([
        'provider effects: at most 1 per key',
        'provider effects: exactly 1 per completed provider node',
      ]),
    );
    const none = clean();
    none.effects = none.effects.slice(1);
    expect(failed(none)).toEqual(['provider effects: exactly 1 per completed provider node']);
  });

  it('an unknown outcome is reported with how it ended, and fails while open', () => {
    const settled = clean();
    (settled.steps[2] as { errorClasses: string[] }).errorClasses = [
      'AmbiguousOutcomeError',
      'InProgressError',
    ];
    const r = check(settled);
    expect(r.ok).toBe(true);
    expect(r.unknownOutcomes.byEnding).toEqual({ 'reconciled without calling again': 1 });

    const open = clean();
    Object.assign(open.steps[2] as object, {
      state: 'discarded',
      errorClasses: ['UnknownOutcomeError'],
    });
    (open.business[2] as { rows: number }).rows = 0;
    (open.runs[0] as { state: string }).state = 'failed';
    expect(failed(open)).toEqual(
      expect.arrayContaining([
        'every unknown outcome ended',
        'no run failed unexpectedly (only declined cards fail)',
      ]),
    );
  });

  it("a dead worker's step that never ran again fails; a slow recovery fails", () => {
    const never = clean();
    never.starts = {};
    (never.steps[4] as { attempt: number }).attempt = 2;
    expect(failed(never)).toEqual(['every step of a killed or stalled worker ran again']);
    const slow = clean();
    slow.starts = { [`${RUN}:ship`]: [{ attempt: 2, at: 60_000, workerId: 'w1' }] };
    expect(failed(slow)).toEqual(['recovery after a kill within 30000 ms']);
  });

  it('a secret found in stored text or a log, an unexpected exit, a fault never injected: each fails', () => {
    const s = clean();
    s.secrets = [
      { where: 'cyclone_steps (errors, output)', secret: 'stripe secret key', count: 1 },
    ];
    s.unexpectedExits = [{ slot: 1, workerId: 'w1', code: 70, signal: null, at: 1, logFile: 'x' }];
    s.faults = [];
    expect(failed(s)).toEqual([
      'no worker process exited on its own',
      'no provider secret stored or logged',
      'every enabled fault kind was injected',
    ]);
  });
});

describe('failovers in the report', () => {
  const failover = (recoveryMs: number | null) => ({
    kind: 'failover' as const,
    at: 5_000,
    from: 'node1',
    to: 'node2',
    detectionMs: 1_000,
    downMs: 2_100,
    held: 4,
    recoveryMs,
    standbyMs: 6_000,
  });
  const withFailover = (recoveryMs: number | null) => {
    const s = clean();
    const o = parseOptions(['--duration', '10s', '--seed', '1', '--faults', 'kill']);
    if (o === 'help') throw new Error('unreachable');
    s.options = { ...o, faults: ['kill', 'failover'] };
    s.faults = [...s.faults, failover(recoveryMs)];
    return s;
  };

  it('counts them with their times; one that recovered passes', () => {
    const r = check(withFailover(3_500));
    expect(r.ok).toBe(true);
    expect(r.faults.failovers).toMatchObject({
      count: 1,
      heldSteps: 4,
      maxDownMs: 2_100,
      recovery: { p50: 3_500, max: 3_500 },
      unrecovered: 0,
      maxStandbyMs: 6_000,
    });
  });

  it('one after which no step completed, or only after --max-recovery, fails', () => {
    const name = 'every failover recovered (a step completed on the new primary) within 30000 ms';
    expect(failed(withFailover(null))).toEqual([name]);
    expect(failed(withFailover(31_000))).toEqual([name]);
  });
});

describe('partitions in the report', () => {
  const partition = (recoveryMs: number | null, unmeasured: string | null = null) => ({
    kind: 'partition' as const,
    at: 2_000,
    slot: 1,
    workerId: 'w1',
    cutMs: 10_000,
    orphans: 3,
    takeoverMs: 3_200,
    healedAt: 12_000,
    recoveryMs,
    unmeasured,
  });
  const withPartition = (recoveryMs: number | null, unmeasured: string | null = null) => {
    const s = clean();
    s.options = { ...s.options, faults: ['kill', 'partition'] };
    s.faults = [...s.faults, partition(recoveryMs, unmeasured)];
    return s;
  };
  const name =
    'every partition taken over and its worker working again after the heal, each within 30000 ms';

  it('one taken over and recovered passes, with its times', () => {
    const r = check(withPartition(2_900));
    expect(r.ok).toBe(true);
    expect(r.faults.partitions).toMatchObject({
      count: 1,
      takeover: { max: 3_200 },
      recovery: { max: 2_900 },
      unfinished: 0,
      unmeasured: [],
      list: [{ at: 2_000, workerId: 'w1', cutMs: 10_000, healedAt: 12_000, recoveryMs: 2_900 }],
    });
  });

  it('a worker never seen working again after the heal, or too late, fails', () => {
    expect(failed(withPartition(null))).toEqual([name]);
    expect(failed(withPartition(31_000))).toEqual([name]);
  });

  it('a recovery the soak could not see (its process killed first) is listed with its reason', () => {
    const reason =
      'its process was killed by the soak 1200 ms after the heal, before it started new work';
    const r = check(withPartition(null, reason));
    expect(r.ok).toBe(true);
    expect(r.faults.partitions.unmeasured).toEqual([{ at: 2_000, workerId: 'w1', reason }]);
    expect(r.faults.partitions.unfinished).toBe(0);
    expect(r.invariants.find((i) => i.name === name)?.value).toMatch(/1 not measurable/);
  });
});

describe('soak options', () => {
  it('durations, fault lists and defaults', () => {
    expect(parseDuration('d', '90s')).toBe(90_000);
    expect(parseDuration('d', '10m')).toBe(600_000);
    expect(parseDuration('d', '250ms')).toBe(250);
    expect(parseDuration('d', '2')).toBe(2_000);
    const o = parseOptions(['--faults', 'kill,stall', '--runs', '40', '--rate', '8']);
    expect(o).toMatchObject({ faults: ['kill', 'stall'], runs: 40, durationMs: 5_000 });
    expect(parseOptions(['--help'])).toBe('help');
    // Never restart a server the soak did not start; a partition where hosts can be made.
    expect(parseOptions(['--database-url', 'postgres://x@h/db'])).toMatchObject({
      faults: [
        'kill',
        'terminate',
        'provider',
        'stall',
        ...(partitionUnavailable() ? [] : ['partition']),
      ],
    });
  });

  it.each([
    [['--duration', 'soon'], /--duration: expected a duration/],
    [['--faults', 'kill,meteor'], /unknown fault 'meteor'/],
    [['--workers', '0'], /--workers: expected 1 to 32/],
    [['--rate', 'fast'], /--rate: expected a number/],
    [['--frobnicate'], /Unknown option '--frobnicate'/],
    [['extra'], /Unexpected argument 'extra'/],
    [['--faults', 'failover', '--database-url', 'postgres://x@h/db'], /never fails over a server/],
  ])('refuses %j', (argv, message) => {
    expect(() => parseOptions(argv)).toThrow(UsageError);
    expect(() => parseOptions(argv)).toThrow(message);
  });
});
