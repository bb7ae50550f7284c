/**
 * One small logger interface, compatible with pino's (`logger.info(obj, msg)`), so users can pass
 * a pino logger as is. Cyclone is silent unless given one.
 */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  /** Returns a logger that adds `bindings` to every entry (pino's `child`). */
  child(bindings: object): Logger;
}

/** A logger that drops everything: the default. */
export const silentLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
  child() {
    return silentLogger;
  },
};

/**
 * A minimal logger writing one JSON line per entry to stderr at or above `level`; enough for the
 * CLI and examples. Use pino in production.
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

/**
 * A child logger made only when something is logged: a worker's per-step logger (one per
 * step, and most steps log nothing, so making them eagerly is wasted work). Behaves as `parent.child(bindings)`.
 */
export class LazyChildLogger implements Logger {
  private made: Logger | undefined;
  constructor(
    private readonly parent: Logger,
    private readonly bindings: object,
  ) {}
  private get logger(): Logger {
    this.made ??= this.parent.child(this.bindings);
    return this.made;
  }
  debug(obj: object, msg?: string): void {
    this.logger.debug(obj, msg);
  }
  info(obj: object, msg?: string): void {
    this.logger.info(obj, msg);
  }
  warn(obj: object, msg?: string): void {
    this.logger.warn(obj, msg);
  }
  error(obj: object, msg?: string): void {
    this.logger.error(obj, msg);
  }
  child(bindings: object): Logger {
    return this.logger.child(bindings);
  }
}
