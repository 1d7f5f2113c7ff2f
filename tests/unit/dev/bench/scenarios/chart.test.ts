import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { scenarioChartSpec, scenarioChartSvg, writeScenarioChart, type ScenarioChartInput, type SystemTimeline } from '../../../../../src/dev/bench/scenarios/chart.js';

function timeline(system: string, backlogBound: number | null, p99Ms: (t: number) => number | null): SystemTimeline {
  return {
    system,
    backlogBound,
    seconds: Array.from({ length: 12 }, (_, t) => ({
      t,
      offered: 10,
      admitted: t < 6 ? 10 : 4,
      refused: t < 6 ? 0 : 6,
      completed: 8,
      p99Ms: p99Ms(t),
      providerCalls: 9,
      provider429: t >= 4 && t < 8 ? 3 : 0,
      backlog: t * 2,
    })),
  };
}

const input: ScenarioChartInput = {
  scenario: 'provider-429-storm',
  timeScale: 10,
  faults: [{ fromSec: 4, toSec: 8, label: 'anthropic 429' }],
  systems: [timeline('sluice', 20, (t) => (t === 3 ? null : 40)), timeline('naive', null, (t) => 40 + t * 10)],
};

/** The spec as plain JSON, to walk it without Vega-Lite's union types. */
interface Column {
  title: string;
  data: { values: { kind: string; system: string; series?: string; value?: number | null }[] };
  facet: { row: { field: string; sort: string[] } };
  spec: { layer: { mark: { type: string; strokeDash?: number[] }; transform: { filter: { equal: string } }[]; encoding: { y?: { scale?: { type?: string } } } }[] };
  resolve: { scale: { y: string } };
}

function columns(chartInput: ScenarioChartInput): Column[] {
  return (JSON.parse(JSON.stringify(scenarioChartSpec(chartInput))) as { hconcat: Column[] }).hconcat;
}

const layerOf = (column: Column, kind: string) => column.spec.layer.filter((l) => l.transform[0]?.filter.equal === kind);

describe('scenarioChartSpec', () => {
  it('titles the chart with the scenario and its time scale', () => {
    expect(scenarioChartSpec(input)).toMatchObject({ title: { text: 'provider-429-storm (time scale 10)' } });
  });

  it('has the four panel kinds, each a row per system in the given order, y shared between systems', () => {
    const cols = columns(input);
    expect(cols.map((c) => c.title)).toEqual(['requests per second', 'p99 latency, send to answer', 'provider calls per second', 'backlog (dashed: its bound)']);
    for (const c of cols) {
      expect(c.facet.row).toMatchObject({ field: 'system', sort: ['sluice', 'naive'] });
      expect(c.resolve.scale.y).toBe('shared');
      expect(new Set(c.data.values.map((v) => v.system))).toEqual(new Set(['sluice', 'naive']));
    }
    const series = (c: Column) => [...new Set(c.data.values.flatMap((v) => v.series ?? []))];
    expect(cols.map(series)).toEqual([['offered', 'admitted', 'refused', 'completed'], ['p99'], ['calls', '429'], ['backlog']]);
  });

  it('shades every fault window in every panel of every system', () => {
    for (const c of columns(input)) {
      expect(layerOf(c, 'fault').some((l) => l.mark.type === 'rect')).toBe(true);
      expect(c.data.values.filter((v) => v.kind === 'fault').map((v) => v.system)).toEqual(['sluice', 'naive']);
    }
  });

  it('draws the backlog bound as a dashed rule, and no rule for a system without a bound', () => {
    const backlog = columns(input)[3]!;
    expect(layerOf(backlog, 'bound')).toEqual([expect.objectContaining({ mark: expect.objectContaining({ type: 'rule', strokeDash: [6, 4] }) })]);
    expect(backlog.data.values.filter((v) => v.kind === 'bound')).toEqual([{ kind: 'bound', system: 'sluice', value: 20 }]);
    const unbounded = columns({ ...input, systems: input.systems.map((s) => ({ ...s, backlogBound: null })) })[3]!;
    expect(unbounded.data.values.filter((v) => v.kind === 'bound')).toEqual([]);
  });

  it('leaves out seconds without a p99 and goes to a log axis when p99s span more than two decades', () => {
    const p99 = columns(input)[1]!;
    expect(p99.data.values.find((v) => v.system === 'sluice' && v.value === null)).toBeDefined();
    expect(layerOf(p99, 'series')[0]!.encoding.y?.scale?.type).toBeUndefined();
    const wide = columns({ ...input, systems: [timeline('sluice', 20, (t) => 5 * 10 ** (t % 4))] })[1]!;
    expect(layerOf(wide, 'series')[0]!.encoding.y?.scale?.type).toBe('log');
  });
});

describe('scenarioChartSvg', () => {
  it('renders an SVG naming each system, the same for the same input', async () => {
    const svg = await scenarioChartSvg(input);
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg).toContain('>sluice</text>');
    expect(svg).toContain('>naive</text>');
    expect(svg).toContain('provider-429-storm (time scale 10)');
    expect(await scenarioChartSvg(input)).toBe(svg);
  });

  it('writes the SVG, creating its directory', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sluice-chart-'));
    try {
      const path = join(dir, 'runs', 'chart.svg');
      await writeScenarioChart(path, input);
      expect(await readFile(path, 'utf8')).toBe(await scenarioChartSvg(input));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
