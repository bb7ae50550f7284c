/** A logger for in-process tests that captures what a worker logs. */
import type { Logger } from '../../src/logger.js';

/** One captured log entry: level, message and the merged bindings/object. */
export interface LogEntry {
  level: 'debug' | 'info' | 'warn' | 'error';
  msg: string | undefined;
  data: Record<string, unknown>;
}

/** A pino-compatible logger that keeps every entry in `entries` (child bindings merged). */
export function captureLogger(): { logger: Logger; entries: LogEntry[]; text(): string } {
  const entries: LogEntry[] = [];
  const make = (bindings: Record<string, unknown>): Logger => {
    const write = (level: LogEntry['level']) => (obj: object, msg?: string) => {
      entries.push({ level, msg, data: { ...bindings, ...(obj as Record<string, unknown>) } });
    };
    return {
      debug: write('debug'),
      info: write('info'),
      warn: write('warn'),
      error: write('error'),
      child: (more) => make({ ...bindings, ...(more as Record<string, unknown>) }),
    };
  };
  return {
    logger: make({}),
    entries,
    text: () =>
      entries
        .map((e) =>
          JSON.stringify({ level: e.level, msg: e.msg, ...e.data }, (_k, v) =>
            v instanceof Error ? { ...v, name: v.name, message: v.message } : v,
          ),
        )
        .join('\n'),
  };
}
