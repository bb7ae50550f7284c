/**
 * Step outcomes per minute (completed and failed attempts), drawn with uPlot from the small
 * per-minute table the workers keep (GET /api/stats/throughput), never from the runs.
 */
import { useEffect, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import type { ThroughputResponse } from '../../../src/shared/api.ts';

function cssVar(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';
}

/** The chart; redrawn when the data, the width or the theme change. */
export function ThroughputChart({ data }: { data: ThroughputResponse }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const theme = document.documentElement.dataset.theme;

  // biome-ignore lint/correctness/useExhaustiveDependencies: the theme changes the CSS variables read inside
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const xs = data.points.map((p) => Date.parse(p.t) / 1000);
    const completed = data.points.map((p) => p.completed);
    const failed = data.points.map((p) => p.failed);
    const axis = { stroke: cssVar('--muted'), grid: { stroke: cssVar('--border') } };
    const opts: uPlot.Options = {
      width: Math.max(300, el.clientWidth),
      height: 220,
      legend: { show: true },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true } },
      axes: [axis, { ...axis, label: `per ${data.bucketMs / 60_000} min` }],
      series: [
        {},
        {
          label: 'completed',
          stroke: cssVar('--ok'),
          fill: `${cssVar('--ok')}33`,
          width: 2,
          points: { show: false },
        },
        {
          label: 'failed',
          stroke: cssVar('--bad'),
          fill: `${cssVar('--bad')}33`,
          width: 2,
          points: { show: false },
        },
      ],
    };
    plot.current?.destroy();
    plot.current = new uPlot(opts, [xs, completed, failed], el);
    const ro = new ResizeObserver(() => {
      plot.current?.setSize({ width: Math.max(300, el.clientWidth), height: 220 });
    });
    ro.observe(el);
    return () => {
      ro.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
  }, [data, theme]);

  const total = data.points.reduce((n, p) => n + p.completed + p.failed, 0);
  return (
    <div>
      <div ref={box} className="chart" data-testid="throughput-chart" />
      {total === 0 ? <p className="muted">No step finished in this window.</p> : null}
    </div>
  );
}
