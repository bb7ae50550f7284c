/**
 * How values show: times in the browser's zone, in UTC or relative (the full UTC instant is
 * always in the tooltip), durations, byte sizes and capped counts.
 */
import { useEffect, useState } from 'react';
import type { Count } from '../../src/shared/api.ts';
import { type TimeMode, useSettings } from './settings.tsx';

const localFmt = new Intl.DateTimeFormat(undefined, {
  year: 'numeric',
  month: '2-digit',
  day: '2-digit',
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
  hour12: false,
  timeZoneName: 'short',
});
const utcFmt = new Intl.DateTimeFormat('en-CA', {
  year: 'numeric',
  month: '2-digit',
  day: '2-digit',
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
  hour12: false,
  timeZone: 'UTC',
});
const rtf = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });

/** `ms` from now as "3 min ago" / "in 2 h". */
export function relative(ms: number): string {
  const abs = Math.abs(ms);
  const sign = ms < 0 ? -1 : 1;
  if (abs < 1_000) return 'now';
  if (abs < 60_000) return rtf.format(sign * Math.round(abs / 1_000), 'second');
  if (abs < 3_600_000) return rtf.format(sign * Math.round(abs / 60_000), 'minute');
  if (abs < 86_400_000) return rtf.format(sign * Math.round(abs / 3_600_000), 'hour');
  return rtf.format(sign * Math.round(abs / 86_400_000), 'day');
}

/** An ISO instant shown per the time mode. */
export function formatTime(iso: string, mode: TimeMode, now: number = Date.now()): string {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  if (mode === 'utc') return `${utcFmt.format(d).replace(',', '')} UTC`;
  if (mode === 'relative') return relative(d.getTime() - now);
  return localFmt.format(d);
}

/** Re-renders every `ms` (relative times move on). */
function useNow(active: boolean, ms = 10_000): number {
  const [now, setNow] = useState(Date.now);
  useEffect(() => {
    if (!active) return;
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [active, ms]);
  return now;
}

/** A time as the settings say, with the exact UTC instant on hover; "—" for null. */
export function Time({ iso }: { iso: string | null | undefined }) {
  const { settings } = useSettings();
  const now = useNow(settings.time === 'relative');
  if (!iso) return <span className="muted">—</span>;
  return (
    <time dateTime={iso} title={iso}>
      {formatTime(iso, settings.time, now)}
    </time>
  );
}

/** A duration in ms as "850 ms", "12.3 s", "4 min 05 s", "2 h 03 min". */
export function formatDuration(ms: number | null | undefined): string {
  if (ms == null || !Number.isFinite(ms)) return '—';
  if (ms < 1_000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(1)} s`;
  if (ms < 3_600_000) {
    const m = Math.floor(ms / 60_000);
    return `${m} min ${String(Math.floor((ms % 60_000) / 1_000)).padStart(2, '0')} s`;
  }
  const h = Math.floor(ms / 3_600_000);
  return `${h} h ${String(Math.floor((ms % 3_600_000) / 60_000)).padStart(2, '0')} min`;
}

/**
 * How long a step took: the server's `durationMs` when it has one; for a step still running, the
 * time since it started; else null (a failed step has no end to measure to).
 */
export function stepDuration(s: {
  state: string;
  startedAt: string | null;
  durationMs: number | null;
}): number | null {
  if (s.durationMs != null) return s.durationMs;
  return s.state === 'running' ? between(s.startedAt, null) : null;
}

/** Milliseconds between two ISO instants (end defaults to now); null without a start. */
export function between(start: string | null, end: string | null): number | null {
  if (!start) return null;
  const a = Date.parse(start);
  const b = end ? Date.parse(end) : Date.now();
  return Number.isNaN(a) || Number.isNaN(b) ? null : Math.max(0, b - a);
}

/** Bytes as "812 B", "64.0 KB", "5.0 MB". */
export function formatBytes(n: number | null | undefined): string {
  if (n == null) return '—';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

const num = new Intl.NumberFormat();

/** A capped count: "1,234", or "10,000+" when the server stopped counting. */
export function formatCount(c: Count | null | undefined): string {
  if (!c) return '—';
  return `${num.format(c.count)}${c.capped ? '+' : ''}`;
}

/** A plain number with grouping. */
export const formatNumber = (n: number): string => num.format(n);

/**
 * A run id shortened for tables: its last 12 characters (ids are time-ordered, so their first
 * characters are the same for runs made close together); the full id is in the link and tooltip.
 */
export const shortId = (id: string): string => (id.length > 13 ? `…${id.slice(-12)}` : id);
