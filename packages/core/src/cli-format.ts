/**
 * The `cyclone` CLI's text in and out: its argument parsers (durations, integers, run states),
 * its tables of runs and steps, and the one line it prints for any error.
 */
import { InvalidArgumentError } from 'commander';
import { CycloneError } from './errors.js';
import { FINISHED_RUN_STATES, type FinishedRunState } from './retention.js';
import type { RunInfo, RunSummary } from './types.js';

const DURATION_UNITS: Record<string, number> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/**
 * Parses a duration of a whole number and one unit: `500ms`, `45s`, `30m`, `12h`, `7d`.
 * A bare number is refused: seconds or milliseconds would be a guess.
 * @returns milliseconds.
 */
export function parseDuration(value: string): number {
  const m = /^(\d+)(ms|s|m|h|d)$/.exec(value);
  const n = m ? Number(m[1]) * (DURATION_UNITS[m[2] as string] as number) : Number.NaN;
  if (!Number.isSafeInteger(n)) {
    throw new InvalidArgumentError(
      m
        ? 'duration too large'
        : 'expected a whole number and a unit (ms, s, m, h, d), e.g. 7d, 12h, 30m, 45s, 500ms',
    );
  }
  return n;
}

/** A duration in ms in the largest unit that divides it: `604800000` → `7d`. */
export function formatDuration(ms: number): string {
  for (const [unit, size] of Object.entries(DURATION_UNITS).reverse()) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

function parseInteger(value: string, min: number, max: number): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < min || n > max) {
    throw new InvalidArgumentError(
      max === Number.MAX_SAFE_INTEGER
        ? `expected an integer ≥ ${min}`
        : `expected an integer from ${min} to ${max}`,
    );
  }
  return n;
}

/** `--limit`: an integer from 1 to 1,000. */
export const parseLimit = (value: string) => parseInteger(value, 1, 1000);
/** `--batch-size`: an integer from 1 to 100,000. */
export const parseBatchSize = (value: string) => parseInteger(value, 1, 100_000);
/** `--max-runs`: an integer ≥ 1. */
export const parseMaxRuns = (value: string) => parseInteger(value, 1, Number.MAX_SAFE_INTEGER);

/** `--state` of `cleanup`: a comma-separated list of finished run states, without repeats. */
export function parseFinishedStates(value: string): FinishedRunState[] {
  const states = value.split(',').map((s) => s.trim());
  for (const s of states) {
    if (!FINISHED_RUN_STATES.includes(s as FinishedRunState)) {
      throw new InvalidArgumentError(
        `expected a comma-separated list of ${FINISHED_RUN_STATES.join(', ')}${s === 'running' ? ' (a running run is never deleted)' : ''}`,
      );
    }
  }
  return [...new Set(states as FinishedRunState[])];
}

/** One line for any error: the typed errors' own messages, pg's message, never a stack. */
export function formatError(e: unknown): string {
  let msg: string;
  if (e instanceof CycloneError) msg = e.message;
  else if (e instanceof AggregateError && e.errors.length > 0) {
    // pg reports a refused connection to every address it tried as an AggregateError.
    msg = formatError(e.errors[0]);
  } else if (e instanceof Error) {
    const code = (e as { code?: string }).code;
    msg = e.message || code || e.name;
    if (code === '42P01' || code === '3F000')
      msg += ' (has `cyclone migrate` been run on this database and schema?)';
    if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'ETIMEDOUT') {
      msg = `cannot connect to PostgreSQL: ${msg}`;
    }
  } else msg = String(e);
  return msg.replace(/\s*\n\s*/g, ' ').trim();
}

/** `cyclone runs`: one row per run, or `no runs`. */
export function formatRuns(runs: RunSummary[]): string {
  if (runs.length === 0) return 'no runs';
  return table(
    ['RUN', 'WORKFLOW', 'STATE', 'STEPS LEFT', 'CREATED', 'SUBMIT KEY'],
    runs.map((r) => [
      r.runId,
      r.workflow,
      r.state,
      String(r.stepsRemaining),
      iso(r.createdAt),
      r.submitKey === null ? '-' : truncate(r.submitKey, 40),
    ]),
  );
}

/** `cyclone run`: the run's fields, then one row per node with its upstream and last error. */
export function formatRun(run: RunInfo): string {
  const head = [
    `run       ${run.runId}`,
    `workflow  ${run.workflow}`,
    `state     ${run.state}`,
    `created   ${iso(run.createdAt)}`,
    `finished  ${run.completedAt ? iso(run.completedAt) : '-'}`,
    ...(run.submitKey === null ? [] : [`key       ${truncate(run.submitKey, 80)}`]),
    `input     ${truncate(JSON.stringify(run.input), 100)}`,
  ];
  const rows = run.steps.map((s) => {
    const last = s.errors[s.errors.length - 1];
    return [
      s.node,
      s.state,
      `${s.attempt}/${s.maxAttempts}`,
      s.after.length ? s.after.join(',') : '-',
      last ? truncate(`[${last.kind}] ${last.message}`.replace(/\s*\n\s*/g, ' '), 100) : '-',
    ];
  });
  return `${head.join('\n')}\n\n${table(['NODE', 'STATE', 'ATTEMPT', 'AFTER', 'LAST ERROR'], rows)}`;
}

/** Left-aligned columns two spaces apart, as wide as their widest cell; the last is not padded. */
function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
}

function iso(d: Date | string | null): string {
  if (d === null) return '-';
  return (d instanceof Date ? d : new Date(d)).toISOString();
}

function truncate(s: string, max: number): string {
  return s.length <= max ? s : `${s.slice(0, max - 1)}…`;
}
