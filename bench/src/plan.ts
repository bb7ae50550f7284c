/** The two modes and the rows of the results table. */
import { fleetRows } from './fleet-rows.js';
import { flowRows } from './flow-rows.js';
import { otelRows } from './otel-rows.js';
import type { RowDef } from './results.js';
import { uiRows } from './ui-rows.js';

export interface Mode {
  name: 'quick' | 'full';
  /** Repetitions of each system in the throughput scenarios (1–4). */
  reps: number;
  /** Repetitions of kill (6) and history (7). */
  slowReps: number;
  /** Repetitions of latency (5); each takes many samples. */
  latencyReps: number;
  submitN: number;
  drainN: number;
  dagRuns: number;
  writeN: number;
  latencySamples: number;
  latencyBudgetMs: number;
  /** Latency with the tuned configs too. */
  latencyTuned: boolean;
  historyN: number;
  /** A drain that is not done after this long reports the rate so far. */
  drainCapMs: number;
  /** Row 9: steps due at one instant. */
  dueN: number;
  /** Row 10: timers, spread evenly at random over `timerSpreadMs`. */
  timerN: number;
  timerSpreadMs: number;
  /** Row 11: future-dated steps in the table, and the no-op runs processed among them. */
  backlogN: number;
  backlogDrainN: number;
  /** Row 12: runs waiting for a signal. */
  signalRuns: number;
}

export const QUICK: Mode = {
  name: 'quick',
  reps: 2,
  slowReps: 1,
  latencyReps: 1,
  submitN: 1_000,
  drainN: 1_500,
  dagRuns: 150,
  writeN: 1_000,
  latencySamples: 100,
  latencyBudgetMs: 4_000,
  latencyTuned: false,
  historyN: 100_000,
  drainCapMs: 4_000,
  dueN: 10_000,
  timerN: 300,
  timerSpreadMs: 5_000,
  backlogN: 100_000,
  backlogDrainN: 5_000,
  signalRuns: 2_000,
};

export const FULL: Mode = {
  name: 'full',
  reps: 3,
  slowReps: 3,
  latencyReps: 1,
  submitN: 20_000,
  drainN: 20_000,
  dagRuns: 2_000,
  writeN: 20_000,
  latencySamples: 500,
  latencyBudgetMs: 30_000,
  latencyTuned: true,
  historyN: 1_000_000,
  drainCapMs: 20_000,
  dueN: 100_000,
  timerN: 1_000,
  timerSpreadMs: 10_000,
  backlogN: 1_000_000,
  backlogDrainN: 20_000,
  signalRuns: 10_000,
};

const n = (x: number) => x.toLocaleString('en-US');

/** Rows of the results table, in order. */
export function rows(m: Mode): RowDef[] {
  const r: RowDef[] = [
    {
      id: '1',
      title: `1. bulk submit of ${n(m.submitN)} single-node runs`,
      unit: 'runs/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '1b',
      title: `1b. single submits, 10 in flight (${n(m.submitN)})`,
      unit: 'runs/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '2d',
      title: `2. process ${n(m.drainN)} no-op runs, default config`,
      unit: 'runs/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '2t',
      title: `2. process ${n(m.drainN)} no-op runs, tuned config`,
      unit: 'runs/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '3',
      title: `3. 10-node DAG (fan-out 8, fan-in 1) × ${n(m.dagRuns)} runs, tuned`,
      unit: 'steps/s (peers: chained jobs/s)',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '4d',
      title: `4. ${n(m.writeN)} steps writing one row (completionTx), default`,
      unit: 'steps/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '4t',
      title: `4. ${n(m.writeN)} steps writing one row (completionTx), tuned`,
      unit: 'steps/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '5p50',
      title: '5. pickup latency p50, idle worker, default',
      unit: 'ms',
      higherIsBetter: false,
      digits: 2,
    },
    {
      id: '5p99',
      title: '5. pickup latency p99, idle worker, default',
      unit: 'ms',
      higherIsBetter: false,
      digits: 2,
    },
  ];
  if (m.latencyTuned) {
    r.push(
      {
        id: '5tp50',
        title: '5. pickup latency p50, idle worker, tuned',
        unit: 'ms',
        higherIsBetter: false,
        digits: 2,
      },
      {
        id: '5tp99',
        title: '5. pickup latency p99, idle worker, tuned',
        unit: 'ms',
        higherIsBetter: false,
        digits: 2,
      },
    );
  }
  r.push(
    {
      id: '6d',
      title: '6. SIGKILL → step running on another worker, defaults',
      unit: 's',
      higherIsBetter: false,
      digits: 2,
    },
    {
      id: '6s',
      title: '6. SIGKILL → step running on another worker, short lease',
      unit: 's',
      higherIsBetter: false,
      digits: 2,
    },
    {
      id: '7h',
      title: `7. process ${n(m.drainN)} no-op runs with ${n(m.historyN)} finished in the tables, tuned`,
      unit: 'runs/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '7r',
      title: '7. … as a fraction of the empty-table figure (2, tuned)',
      unit: '×',
      higherIsBetter: true,
      digits: 2,
    },
    {
      id: '8d',
      title: '8. worker peak RSS, scenario 2 default',
      unit: 'MiB',
      higherIsBetter: false,
      digits: 0,
    },
    {
      id: '8t',
      title: '8. worker peak RSS, scenario 2 tuned',
      unit: 'MiB',
      higherIsBetter: false,
      digits: 0,
    },
    // Rows 9–12: Cyclone only (cyclone-scenarios.ts).
    {
      id: '9',
      title: `9. ${n(m.dueN)} steps due at one instant (delayed runs), tuned: due time → last completion`,
      unit: 'steps/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '9n',
      title: `9. … reference: ${n(m.dueN)} no-op runs available at once, tuned (row 2's scenario at row 9's N)`,
      unit: 'runs/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '9r',
      title: '9. … due burst as a fraction of the reference',
      unit: '×',
      higherIsBetter: true,
      digits: 2,
    },
    {
      id: '10p50',
      title: `10. timer lateness p50, ${n(m.timerN)} timers over ${m.timerSpreadMs / 1000} s, idle tuned worker (started_at − scheduled_at)`,
      unit: 'ms',
      higherIsBetter: false,
      digits: 1,
    },
    {
      id: '10p99',
      title: `10. timer lateness p99, ${n(m.timerN)} timers over ${m.timerSpreadMs / 1000} s, idle tuned worker`,
      unit: 'ms',
      higherIsBetter: false,
      digits: 1,
    },
    {
      id: '11',
      title: `11. process ${n(m.backlogDrainN)} no-op runs with ${n(m.backlogN)} future-dated steps in the table, tuned`,
      unit: 'runs/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '11e',
      title: `11. … reference: the same in an empty table (row 2's tuned scenario at ${n(m.backlogDrainN)}, alternating with 11)`,
      unit: 'runs/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '11r',
      title: '11. … with the backlog as a fraction of the empty-table figure',
      unit: '×',
      higherIsBetter: true,
      digits: 2,
    },
    {
      id: '12',
      title: `12. ${n(m.signalRuns)} runs waiting for a signal, signals sent 10 in flight, worker concurrency 10: first signal → last run completed`,
      unit: 'signals/s',
      higherIsBetter: true,
      digits: 0,
    },
    ...otelRows(m),
    ...flowRows(m),
    ...uiRows(),
    ...fleetRows(m),
  );
  return r;
}
