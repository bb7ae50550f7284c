/** What the scenarios record and the report prints. */
import type { StatementStat } from './query-counter.js';
import type { SystemName } from './systems/types.js';

/** A result column: a system under test, or the pgbench floor (a reference, not a peer). */
export type Column = SystemName | 'pgbench';

/** A row of the results table. */
export interface RowDef {
  id: string;
  title: string;
  unit: string;
  higherIsBetter: boolean;
  /** Decimals shown. */
  digits: number;
}

/** Database and process work of one drain (or submit) run, per job. */
export interface WorkSample {
  row: string;
  system: SystemName;
  jobs: number;
  /** Transactions committed or rolled back in the database / jobs (whole worker lifetime). */
  xactsPerJob: number;
  /** Statements the client sent in the measured window / jobs (undefined when not counted). */
  statementsPerJob?: number;
  /** Rows inserted + updated + deleted / jobs. */
  rowsPerJob: number;
  /** CPU of the server backends serving the worker in the window, ms per 1,000 jobs. */
  pgCpuPer1k?: number;
  /** CPU of the worker process in the window, ms per 1,000 jobs. */
  workerCpuPer1k?: number;
  rssMiB?: number;
  top?: StatementStat[];
}

/** One cell: numbers (one per repetition) or a fixed text (e.g. a documented bound). */
export interface Cell {
  values: number[];
  text?: string;
  /** Footnote-like remarks (time cap hit, samples taken…). */
  notes: string[];
  /** A run hit the drain time cap (its figure is the rate so far). */
  capped?: boolean;
}

export class Results {
  readonly cells = new Map<string, Cell>();
  readonly work: WorkSample[] = [];

  private cell(row: string, col: Column): Cell {
    const key = `${row}|${col}`;
    let c = this.cells.get(key);
    if (!c) {
      c = { values: [], notes: [] };
      this.cells.set(key, c);
    }
    return c;
  }

  add(row: string, col: Column, value: number, note?: string): void {
    const c = this.cell(row, col);
    if (Number.isFinite(value)) c.values.push(value);
    if (note && !c.notes.includes(note)) c.notes.push(note);
  }

  /** Marks that a run of this cell hit the drain time cap. */
  markCapped(row: string, col: Column): void {
    this.cell(row, col).capped = true;
  }

  text(row: string, col: Column, text: string): void {
    this.cell(row, col).text = text;
  }

  get(row: string, col: Column): Cell | undefined {
    return this.cells.get(`${row}|${col}`);
  }
}
