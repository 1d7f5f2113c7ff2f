import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import type { ChartData } from './view-models.js';

const COLORS = ['#2f7ed8', '#8bbc21', '#f28f43', '#c42525', '#77a1e5', '#a6c96a', '#910000', '#492970'];

/** A time-series chart drawn by uPlot; redrawn when its labels change, fed new data otherwise. */
export function Chart({ title, chart, unit }: { title: string; chart: ChartData; unit: string }) {
  const host = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot>();
  const shape = chart.labels.join('|');
  useEffect(() => {
    if (!host.current) return;
    const opts: uPlot.Options = {
      width: Math.max(300, host.current.clientWidth),
      height: 180,
      series: [{}, ...chart.labels.map((label, i) => ({ label, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: false }))],
      axes: [{}, { values: (_u, ticks) => ticks.map((t) => `${t}${unit}`), size: 60 }],
      legend: { show: true },
      cursor: { drag: { x: false, y: false } },
    };
    plot.current = new uPlot(opts, chart.data, host.current);
    return () => plot.current?.destroy();
  }, [shape]);
  useEffect(() => plot.current?.setData(chart.data), [chart]);
  return (
    <figure class="chart">
      <figcaption>{title}</figcaption>
      <div ref={host} />
      {chart.labels.length === 0 && <p class="muted">nothing counted yet</p>}
    </figure>
  );
}
