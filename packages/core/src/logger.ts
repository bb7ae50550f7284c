/**
 * One small logger interface, compatible with pino's (`logger.info(obj, msg)`), so users can pass
 * a pino logger as is. Without one, `Client` and `Worker` write warnings and errors to stderr
 * (`stderrLogger`): a failing step is never silent. `silentLogger` turns that off.
 */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  /** Returns a logger that adds `bindings` to every entry (pino's `child`). */
  child(bindings: object): Logger;
}

/** A logger that drops everything: pass it as `logger` for a quiet client or worker. */
export const silentLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
  child() {
    return silentLogger;
  },
};

/** The levels of Cyclone's own loggers, lowest first; `silent` writes nothing. */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';

const LEVELS: readonly LogLevel[] = ['debug', 'info', 'warn', 'error', 'silent'];

/** Options of `stderrLogger`. */
export interface StderrLoggerOptions {
  /** Lowest level written. Default: `CYCLONE_LOG` of the environment if it names a level, else `warn`. */
  level?: LogLevel;
  /** Fields added to every line (as pino's `child` bindings). */
  bindings?: object;
  /** Where a line goes. Default: `process.stderr`. */
  write?: (line: string) => void;
}

/** Fields shown first, in this order, when an entry has them; the worker's id goes last. */
const FIRST = ['runId', 'node', 'attempt', 'kind', 'state', 'delayMs'];
const LAST = ['workerId'];

/**
 * The default logger of `Client` and `Worker`: one readable line per entry on stderr, at `warn`
 * and above unless told otherwise (`CYCLONE_LOG=silent|error|warn|info|debug`, or `level`):
 *
 *     12:00:01.234 WARN  step attempt failed: card declined · runId=… node=charge attempt=1 state=retryable delayMs=1000 · workerId=…
 *
 * For production, give `Client` a pino logger instead (its JSON lines carry the same fields).
 */
export function stderrLogger(options: StderrLoggerOptions = {}): Logger {
  const level = options.level ?? levelFromEnv(process.env.CYCLONE_LOG) ?? 'warn';
  const bindings = options.bindings ?? {};
  const write = options.write ?? ((line: string) => void process.stderr.write(line));
  const min = LEVELS.indexOf(level);
  const entry = (lvl: LogLevel) => (obj: object, msg?: string) => {
    if (LEVELS.indexOf(lvl) < min) return;
    write(`${formatLine(lvl, { ...bindings, ...obj }, msg)}\n`);
  };
  return {
    debug: entry('debug'),
    info: entry('info'),
    warn: entry('warn'),
    error: entry('error'),
    child: (more) => stderrLogger({ level, write, bindings: { ...bindings, ...more } }),
  };
}

/** The level `CYCLONE_LOG` names, if any. */
function levelFromEnv(value: string | undefined): LogLevel | undefined {
  const v = value?.trim().toLowerCase();
  return LEVELS.includes(v as LogLevel) ? (v as LogLevel) : undefined;
}

/** `time LEVEL msg: err · first fields · other fields · last fields`, on one line. */
export function formatLine(level: LogLevel, fields: object, msg?: string): string {
  const f = fields as Record<string, unknown>;
  const time = new Date().toISOString().slice(11, 23);
  const err = f.err === undefined ? '' : `: ${oneLine(text(f.err))}`;
  const pairs = (keys: string[]) =>
    keys
      .filter((k) => f[k] !== undefined)
      .map((k) => `${k}=${value(f[k])}`)
      .join(' ');
  const rest = Object.keys(f).filter((k) => k !== 'err' && !FIRST.includes(k) && !LAST.includes(k));
  const parts = [pairs(FIRST), pairs(rest), pairs(LAST)].filter(Boolean);
  return `${time} ${level.toUpperCase().padEnd(5)} ${oneLine(msg ?? '')}${err}${parts.length ? ` · ${parts.join(' · ')}` : ''}`;
}

function text(v: unknown): string {
  if (v instanceof Error) return v.message || v.name;
  return typeof v === 'string' ? v : (JSON.stringify(v) ?? String(v));
}

/** A field's value: bare when it has no space or quote, else JSON-quoted. */
function value(v: unknown): string {
  const s = v instanceof Date ? v.toISOString() : text(v);
  return /^[^\s"=]*$/.test(s) && s !== '' ? s : JSON.stringify(oneLine(s));
}

function oneLine(s: string): string {
  return s.replace(/\s*\n\s*/g, ' ');
}

/**
 * A minimal logger writing one JSON line per entry to stderr at or above `level` (default
 * `info`), for log collectors that read JSON; `stderrLogger` writes lines for people. Use pino in
 * production.
 */
export function consoleLogger(
  level: 'debug' | 'info' | 'warn' | 'error' = 'info',
  bindings: object = {},
): Logger {
  const order = { debug: 10, info: 20, warn: 30, error: 40 } as const;
  const write = (lvl: keyof typeof order) => (obj: object, msg?: string) => {
    if (order[lvl] < order[level]) return;
    process.stderr.write(
      `${JSON.stringify({ level: lvl, time: new Date().toISOString(), ...bindings, ...obj, msg })}\n`,
    );
  };
  return {
    debug: write('debug'),
    info: write('info'),
    warn: write('warn'),
    error: write('error'),
    child: (more) => consoleLogger(level, { ...bindings, ...more }),
  };
}
