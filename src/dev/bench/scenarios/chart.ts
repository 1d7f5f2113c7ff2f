/**
 * A scenario run's timeline as one SVG: a row per system under test (Sluice above the naive
 * baseline), four panels per row (requests, p99, provider calls, backlog), fault windows shaded.
 * The chart is a Vega-Lite spec rendered headless by Vega, without a browser or a native canvas.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';

export interface TimelineSecond {
  /** Seconds from the scenario start (scaled time as run). */
  t: number;
  /** Requests sent by clients this second, client retries included. */
  offered: number;
  /** Answered 202 this second. */
  admitted: number;
  /** Answered 429/503, or a transport error, this second. */
  refused: number;
  /** Runs that reached a terminal status this second. */
  completed: number;
  /** p99 of the send→answer latencies of the requests answered this second; null when none was. */
  p99Ms: number | null;
  /** LLM provider calls this second. */
  providerCalls: number;
  /** Of which answered 429 (rate limit or injected). */
  provider429: number;
  /** Accepted runs not yet terminal at the end of this second. */
  backlog: number;
}

export interface SystemTimeline {
  /** e.g. 'sluice', 'naive', 'sluice-without-noisy' */
  system: string;
  /** The backlog's configured bound, null when unbounded. */
  backlogBound: number | null;
  seconds: TimelineSecond[];
}

export interface ScenarioChartInput {
  scenario: string;
  timeScale: number;
  /** Fault windows in run seconds, drawn as shaded bands. */
  faults: { fromSec: number; toSec: number; label: string }[];
  systems: SystemTimeline[];
}

/** One row of a panel's data: a series' value at a second, a fault band, or the backlog's bound. */
type Datum =
  | { kind: 'series'; system: string; series: string; t: number; value: number | null }
  | { kind: 'fault'; system: string; from: number; to: number; label: string }
  | { kind: 'bound'; system: string; value: number };

interface Panel {
  title: string;
  yTitle: string;
  /** Series name → its value in a second, in legend order. */
  series: [string, (s: TimelineSecond) => number | null][];
  colours: string[];
  logY?: boolean;
  /** Some seconds have no value (null), which breaks the line. */
  gaps?: boolean;
  showBound?: boolean;
  labelFaults?: boolean;
}

/** A panel column of the chart's `hconcat`: Vega-Lite exports no name for it. */
type PanelSpec = Extract<TopLevelSpec, { hconcat: unknown }>['hconcat'][number];
type Layer = Extract<Extract<PanelSpec, { facet: unknown }>['spec'], { layer: unknown }>['layer'][number];

const PANEL_WIDTH = 220;
const PANEL_HEIGHT = 120;
/** Wider than this ratio between the largest and smallest p99, a linear axis flattens the small ones. */
const LOG_SPAN = 100;

/** A log axis cannot show 0 ms: such a second is left out like one without answers. */
function plottedP99(s: TimelineSecond): number | null {
  return s.p99Ms !== null && s.p99Ms > 0 ? s.p99Ms : null;
}

/** The chart's Vega-Lite spec: pure, so the layout is testable without rendering. */
export function scenarioChartSpec(input: ScenarioChartInput): TopLevelSpec {
  const p99s = input.systems.flatMap((s) => s.seconds.flatMap((sec) => plottedP99(sec) ?? []));
  const panels: Panel[] = [
    {
      title: 'requests per second',
      yTitle: 'requests/s',
      series: [
        ['offered', (s) => s.offered],
        ['admitted', (s) => s.admitted],
        ['refused', (s) => s.refused],
        ['completed', (s) => s.completed],
      ],
      colours: ['#7f7f7f', '#2ca02c', '#d62728', '#1f77b4'],
      labelFaults: true,
    },
    {
      title: 'p99 latency, send to answer',
      yTitle: 'p99 (ms)',
      series: [['p99', plottedP99]],
      colours: ['#9467bd'],
      gaps: true,
      logY: p99s.length > 0 && Math.max(...p99s) / Math.min(...p99s) > LOG_SPAN,
    },
    {
      title: 'provider calls per second',
      yTitle: 'calls/s',
      series: [
        ['calls', (s) => s.providerCalls],
        ['429', (s) => s.provider429],
      ],
      colours: ['#1f77b4', '#d62728'],
    },
    {
      title: 'backlog (dashed: its bound)',
      yTitle: 'runs',
      series: [['backlog', (s) => s.backlog]],
      colours: ['#ff7f0e'],
      showBound: true,
    },
  ];
  const lastSec = Math.max(1, ...input.systems.flatMap((s) => s.seconds.map((sec) => sec.t)), ...input.faults.map((f) => f.toSec));
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: { text: `${input.scenario} (time scale ${input.timeScale})`, anchor: 'start', fontSize: 16 },
    hconcat: panels.map((panel, i) => panelSpec(input, panel, lastSec, i === 0)),
    // Each panel kind has its own series and units; within one, the facet shares y across systems.
    resolve: { scale: { color: 'independent' }, legend: { color: 'independent' } },
    config: { view: { stroke: '#ddd' }, axis: { labelFontSize: 10, titleFontSize: 11 }, legend: { orient: 'top', columns: 2, labelFontSize: 10, title: null, symbolType: 'stroke' } },
  };
}

function panelSpec(input: ScenarioChartInput, panel: Panel, lastSec: number, systemHeaders: boolean): PanelSpec {
  const values: Datum[] = input.systems.flatMap((sys) => [
    ...input.faults.map((f): Datum => ({ kind: 'fault', system: sys.system, from: f.fromSec, to: f.toSec, label: f.label })),
    ...(panel.showBound && sys.backlogBound !== null ? [{ kind: 'bound', system: sys.system, value: sys.backlogBound } satisfies Datum] : []),
    ...sys.seconds.flatMap((sec) => panel.series.map(([series, value]): Datum => ({ kind: 'series', system: sys.system, series, t: sec.t, value: value(sec) }))),
  ]);
  // One explicit domain, so every panel of every system shares the run's time axis.
  const x = (field: 't' | 'from') => ({ field, type: 'quantitative' as const, title: 'run seconds', scale: { domain: [0, lastSec], nice: false } });
  const of = (kind: Datum['kind']) => [{ filter: { field: 'kind', equal: kind } }];
  const layers: Layer[] = [{ transform: of('fault'), mark: { type: 'rect', color: '#fbb4ae', opacity: 0.5 }, encoding: { x: x('from'), x2: { field: 'to' } } }];
  if (panel.labelFaults) {
    layers.push({
      transform: of('fault'),
      mark: { type: 'text', align: 'left', baseline: 'top', dx: 2, dy: 2, fontSize: 9, color: '#a33' },
      encoding: { x: x('from'), y: { value: 0 }, text: { field: 'label' } },
    });
  }
  const names = panel.series.map(([name]) => name);
  layers.push({
    transform: of('series'),
    // Points too, so that a second between two gaps (no answers around it) still shows.
    mark: { type: 'line', strokeWidth: 1.5, point: panel.gaps ? { size: 6, filled: true } : false },
    encoding: {
      x: x('t'),
      y: { field: 'value', type: 'quantitative', title: panel.yTitle, scale: panel.logY ? { type: 'log' } : {}, axis: { tickCount: 5, format: '~s' } },
      color: { field: 'series', type: 'nominal', sort: names, scale: { domain: names, range: panel.colours } },
    },
  });
  if (panel.showBound) layers.push({ transform: of('bound'), mark: { type: 'rule', strokeDash: [6, 4], color: '#ff7f0e' }, encoding: { y: { field: 'value', type: 'quantitative' } } });
  return {
    title: panel.title,
    data: { values },
    facet: {
      row: {
        field: 'system',
        type: 'nominal',
        sort: input.systems.map((s) => s.system),
        header: systemHeaders ? { title: null, labelFontSize: 13, labelFontWeight: 'bold' } : { title: null, labels: false },
      },
    },
    spec: { width: PANEL_WIDTH, height: PANEL_HEIGHT, layer: layers },
    resolve: { scale: { y: 'shared' } },
  };
}

/** The chart as an SVG document. */
export async function scenarioChartSvg(input: ScenarioChartInput): Promise<string> {
  const view = new vega.View(vega.parse(compile(scenarioChartSpec(input)).spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

/** Writes the chart's SVG to `path`, creating its directory. */
export async function writeScenarioChart(path: string, input: ScenarioChartInput): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, await scenarioChartSvg(input));
}
