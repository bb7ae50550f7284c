/** The demo's command line. */
import { parseArgs } from 'node:util';

export interface DemoOptions {
  /** Orders the load generator sends. */
  orders: number;
  /** Worker processes alive at any time. */
  workers: number;
  /** Share of orders sent again, as a client does after a timeout. */
  resend: number;
  /** HTTP requests in flight at once. */
  concurrency: number;
  /** Mean interval between two SIGKILLs, ms. */
  killEveryMs: number;
  /** Most kills that catch a worker holding steps (Infinity: until the work is done). */
  maxKills: number;
  /** Drop one response of each provider after its effect. */
  faults: boolean;
  /** Give up (and fail) after this long, ms. */
  timeoutMs: number;
  /** Print the summary as one JSON line (`SUMMARY {…}`) after the table. */
  json: boolean;
  /** After the summary, serve the operator UI on this loopback port until Ctrl-C; none: no UI. */
  uiPort: number | undefined;
}

export const USAGE = `pnpm demo [options]

  --orders N        orders to send (default 500)
  --workers N       worker processes, 1 to 6 (default 3)
  --resend R        share of orders re-sent after a client timeout, 0..1 (default 0.2)
  --concurrency N   HTTP requests in flight (default 16)
  --kill-every S    seconds between two SIGKILLs, on average (default 3)
  --kills N         most kills that catch a worker holding steps (default: no limit; 0 kills none)
  --no-faults       do not drop provider responses
  --timeout S       fail if the work is not done after S seconds (default 240)
  --json            also print the summary as a SUMMARY {json} line
  --ui              then keep the operator UI open on the demo's database (Ctrl-C stops it)
  --ui-port N       its port on 127.0.0.1 (default 7777; implies --ui)
  -h, --help        this text

Database: DATABASE_URL, else an embedded PostgreSQL under .cyclone/.`;

/** @throws Error with the problem and the usage on a bad option. */
export function parseOptions(argv: string[]): DemoOptions | 'help' {
  const { values } = parseArgs({
    args: argv,
    options: {
      orders: { type: 'string' },
      workers: { type: 'string' },
      resend: { type: 'string' },
      concurrency: { type: 'string' },
      'kill-every': { type: 'string' },
      kills: { type: 'string' },
      'no-faults': { type: 'boolean' },
      timeout: { type: 'string' },
      json: { type: 'boolean' },
      ui: { type: 'boolean' },
      'ui-port': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    allowPositionals: false,
  });
  if (values.help) return 'help';
  const num = (name: string, v: string | undefined, def: number, min: number, max: number) => {
    if (v === undefined) return def;
    const n = Number(v);
    if (!Number.isFinite(n) || n < min || n > max) {
      throw new Error(`--${name} must be a number from ${min} to ${max}, got ${JSON.stringify(v)}`);
    }
    return n;
  };
  const int = (name: string, v: string | undefined, def: number, min: number, max: number) => {
    if (v === undefined) return def;
    const n = num(name, v, def, min, max);
    if (!Number.isInteger(n)) throw new Error(`--${name} must be a whole number, got ${v}`);
    return n;
  };
  return {
    orders: int('orders', values.orders, 500, 1, 100_000),
    // Each worker holds about 13 database connections (PostgreSQL's default limit is 100).
    workers: int('workers', values.workers, 3, 1, 6),
    resend: num('resend', values.resend, 0.2, 0, 1),
    concurrency: int('concurrency', values.concurrency, 16, 1, 256),
    killEveryMs: num('kill-every', values['kill-every'], 3, 0.5, 3600) * 1000,
    maxKills: int('kills', values.kills, Number.POSITIVE_INFINITY, 0, 10_000),
    faults: !values['no-faults'],
    timeoutMs: num('timeout', values.timeout, 240, 5, 3600) * 1000,
    json: values.json ?? false,
    uiPort:
      values.ui || values['ui-port'] !== undefined
        ? int('ui-port', values['ui-port'], 7777, 0, 65_535)
        : undefined,
  };
}
