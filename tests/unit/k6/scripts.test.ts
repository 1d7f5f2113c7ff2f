import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { expectedArrivals } from '../../../src/dev/bench/scenarios/arrivals.js';
import type { ArrivalPattern } from '../../../src/dev/bench/scenarios/scenario.js';
import { packageRoot } from '../../../src/util/package-root.js';

const k6Dir = join(packageRoot(), 'k6');
const scenariosDir = join(k6Dir, 'scenarios');
const scenarioNames = readdirSync(scenariosDir)
  .filter((f) => f.endsWith('.json'))
  .map((f) => f.slice(0, -'.json'.length));
const scripts = readdirSync(k6Dir).filter((f) => f.endsWith('.js'));
const libModules = readdirSync(join(k6Dir, 'lib')).filter((f) => f.endsWith('.js'));

interface StageOptions {
  duration: string;
  target: number;
}
interface ArrivalOptions {
  executor: 'constant-arrival-rate' | 'ramping-arrival-rate';
  timeUnit: string;
  rate?: number;
  duration?: string;
  startRate?: number;
  stages?: StageOptions[];
  preAllocatedVUs: number;
  maxVUs: number;
  exec: string;
  env: Record<string, string>;
  tags: Record<string, string>;
}
interface ScenarioOptionsModule {
  k6Options(def: unknown, env: Record<string, string>): { scenarios: Record<string, any>; thresholds: Record<string, string[]> };
  clientDelaysSec(def: unknown, timeScale: number): number[];
}
const lib: ScenarioOptionsModule = await import('../../../k6/lib/scenario-options.js' as string);

/** A definition as raw JSON, as the k6 scripts read it (no loader, no normalisation). */
function rawDefinition(name: string): any {
  return JSON.parse(readFileSync(join(scenariosDir, `${name}.json`), 'utf8'));
}

/**
 * The definition behind a proxy that throws on reading a field it does not have, at any depth:
 * the options may use only what the file says. `toJSON` is exempt: JSON.stringify asks every
 * object for it, which is serialising, not reading a field.
 */
function definitionOnly<T>(value: T, path: string): T {
  if (typeof value !== 'object' || value === null) return value;
  return new Proxy(value, {
    get(target, key, receiver) {
      if (typeof key === 'string' && key !== 'toJSON' && !Reflect.has(target, key)) throw new Error(`${path}.${key} is not in the definition`);
      return definitionOnly(Reflect.get(target, key, receiver), `${path}.${String(key)}`);
    },
  });
}

function ms(duration: string): number {
  const match = /^(\d+)ms$/.exec(duration);
  if (match === null) throw new Error(`not a whole number of ms: ${duration}`);
  return Number(match[1]);
}

/** Iterations k6 starts by `tMs` (the integral of its rate: constant, or linear within each stage). */
function k6ArrivalsBy(s: ArrivalOptions, tMs: number): number {
  const unitSec = Number(/^(\d+)s$/.exec(s.timeUnit)![1]);
  if (s.executor === 'constant-arrival-rate') return ((s.rate! / unitSec) * Math.min(tMs, ms(s.duration!))) / 1000;
  let count = 0;
  let startMs = 0;
  let from = s.startRate! / unitSec;
  for (const stage of s.stages!) {
    const to = stage.target / unitSec;
    const lengthMs = ms(stage.duration);
    const inStageMs = Math.max(0, Math.min(tMs - startMs, lengthMs));
    if (inStageMs > 0) count += ((from + ((to - from) * inStageMs) / lengthMs / 2) * inStageMs) / 1000;
    startMs += lengthMs;
    from = to;
  }
  return count;
}

function lengthMs(s: ArrivalOptions): number {
  return s.executor === 'constant-arrival-rate' ? ms(s.duration!) : s.stages!.reduce((sum, stage) => sum + ms(stage.duration), 0);
}

describe('k6 scripts', () => {
  it.each([...scripts.map((f) => join(k6Dir, f)), ...libModules.map((f) => join(k6Dir, 'lib', f))])('%s parses as an ES module', (file) => {
    const text = readFileSync(file, 'utf8');
    const { diagnostics } = ts.transpileModule(text, {
      fileName: file,
      reportDiagnostics: true,
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, allowJs: true },
    });
    expect((diagnostics ?? []).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'))).toEqual([]);
    expect(ts.isExternalModule(ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true, ts.ScriptKind.JS))).toBe(true);
  });

  it('scenario-options.js imports nothing, so Node and k6 both load it', () => {
    const source = ts.createSourceFile('scenario-options.js', readFileSync(join(k6Dir, 'lib', 'scenario-options.js'), 'utf8'), ts.ScriptTarget.ES2022, true, ts.ScriptKind.JS);
    expect(source.statements.filter(ts.isImportDeclaration)).toEqual([]);
  });

  it('every scenario has a script, and every script reads the scenario of its own name', () => {
    expect(scripts.map((f) => f.slice(0, -'.js'.length)).sort()).toEqual([...scenarioNames].sort());
    for (const script of scripts) {
      const opened = [...readFileSync(join(k6Dir, script), 'utf8').matchAll(/open\('\.\/scenarios\/([^']+)\.json'\)/g)].map((m) => m[1]);
      expect(opened, script).toEqual([script.slice(0, -'.js'.length)]);
      expect(existsSync(join(scenariosDir, `${opened[0]}.json`))).toBe(true);
    }
  });
});

describe('k6Options', () => {
  describe.each(scenarioNames)('%s', (name) => {
    it.each([1, 2, 10])('sends each stream at its rates over the scaled duration, using only the definition (TIME_SCALE %i)', (k) => {
      const raw = rawDefinition(name);
      const { scenarios } = lib.k6Options(definitionOnly(raw, name), { TIME_SCALE: String(k) });
      const streams = Object.entries(scenarios).filter(([, s]) => s.exec === 'submit');
      expect(streams).toHaveLength(raw.arrivals.length);
      streams.forEach(([scenarioName, s]: [string, ArrivalOptions], i) => {
        const stream = raw.arrivals[i];
        expect(scenarioName).toMatch(/^[A-Za-z0-9_-]+$/);
        expect(s.env).toEqual({ STREAM_TENANT: stream.tenant, STREAM_WORKFLOW: stream.workflow, STREAM_CLASS: stream.class });
        expect(s.tags).toEqual({ tenant: stream.tenant, workflow: stream.workflow, class: stream.class });
        expect(s.executor).toBe(stream.pattern.kind === 'constant' ? 'constant-arrival-rate' : 'ramping-arrival-rate');
        expect(s.maxVUs).toBeGreaterThanOrEqual(s.preAllocatedVUs);
        const durationMs = (raw.durationSec * 1000) / k;
        expect(lengthMs(s)).toBe(durationMs);
        // Scaled time t runs the pattern at unscaled t·k at the same rate: Λ(t·k)/k by t.
        for (let tMs = 0; tMs <= durationMs; tMs += durationMs / 240) {
          expect(k6ArrivalsBy(s, tMs)).toBeCloseTo(expectedArrivals(stream.pattern as ArrivalPattern, (tMs * k) / 1000) / k, 6);
        }
      });
    });

    it('has a threshold for each target k6 measures, and the contract check always', () => {
      const raw = rawDefinition(name);
      const { thresholds } = lib.k6Options(definitionOnly(raw, name), {});
      expect(thresholds).toEqual({
        'checks{kind:contract}': ['rate>0.99'],
        ...(raw.targets.answerP99Ms !== undefined && { 'http_req_duration{call:submit}': [`p(99)<${raw.targets.answerP99Ms}`] }),
        ...(raw.targets.interactiveP99Ms !== undefined && { interactive_answer_ms: [`p(99)<${raw.targets.interactiveP99Ms}`] }),
      });
    });

    it('changes the provider faults at each window start and end only with SIM_URL', () => {
      const raw = rawDefinition(name);
      const faultScenarios = (env: Record<string, string>) => Object.values(lib.k6Options(definitionOnly(raw, name), env).scenarios).filter((s) => s.exec === 'setFault');
      expect(faultScenarios({})).toEqual([]);
      const expected = raw.faults
        .flatMap((f: any) => [
          { startMs: (f.atSec * 1000) / 2, env: { FAULT_TARGET: f.target, FAULT_PATCH: JSON.stringify(f.fault) } },
          { startMs: ((f.atSec + f.forSec) * 1000) / 2, env: { FAULT_TARGET: f.target } },
        ])
        .sort((a: { startMs: number }, b: { startMs: number }) => a.startMs - b.startMs);
      const got = faultScenarios({ SIM_URL: 'http://127.0.0.1:8089', TIME_SCALE: '2' });
      for (const s of got) expect(s).toMatchObject({ executor: 'shared-iterations', vus: 1, iterations: 1 });
      expect(got.map((s) => ({ startMs: ms(s.startTime), env: s.env }))).toEqual(expected);
    });
  });

  it('halves a spike’s stages at TIME_SCALE 2 and keeps its rates', () => {
    const { scenarios } = lib.k6Options(rawDefinition('spike'), { TIME_SCALE: '2' });
    expect(scenarios['stream-0-tenant-a']).toMatchObject({
      executor: 'ramping-arrival-rate',
      startRate: 2,
      timeUnit: '1s',
      stages: [
        { duration: '15000ms', target: 2 },
        { duration: '0ms', target: 60 },
        { duration: '15000ms', target: 60 },
        { duration: '0ms', target: 2 },
        { duration: '15000ms', target: 2 },
      ],
    });
    expect(scenarios['stream-1-tenant-b']).toMatchObject({ executor: 'constant-arrival-rate', rate: 1, timeUnit: '1s', duration: '45000ms' });
  });

  it('keeps a fractional rate exact with a longer time unit, and leaves out a stream that never sends', () => {
    const def = rawDefinition('baseline');
    def.arrivals[0].pattern = { kind: 'ramp', from: 0.5, to: 2.25, overSec: 30 };
    def.arrivals[1].pattern = { kind: 'constant', rate: 0 };
    const { scenarios } = lib.k6Options(def, {});
    expect(scenarios['stream-0-tenant-a']).toMatchObject({ startRate: 50, timeUnit: '100s', stages: [{ duration: '30000ms', target: 225 }, { duration: '30000ms', target: 225 }] });
    expect(scenarios['stream-1-tenant-b']).toBeUndefined();
  });

  it('merges overlapping windows of one target in file order and restores the baseline when none is in force', () => {
    const def = rawDefinition('baseline');
    def.faults = [
      { atSec: 10, forSec: 20, target: 'anthropic', fault: { latencyMs: 500 } },
      { atSec: 20, forSec: 20, target: 'anthropic', fault: { errorStatus: 429, latencyMs: 100 } },
      { atSec: 30, forSec: 5, target: 'report', fault: { hang: true } },
    ];
    const changes = Object.values(lib.k6Options(def, { SIM_URL: 'http://sim' }).scenarios)
      .filter((s) => s.exec === 'setFault')
      .map((s) => ({ at: s.startTime, target: s.env.FAULT_TARGET, patch: s.env.FAULT_PATCH === undefined ? null : JSON.parse(s.env.FAULT_PATCH) }));
    expect(changes).toEqual([
      { at: '10000ms', target: 'anthropic', patch: { latencyMs: 500 } },
      { at: '20000ms', target: 'anthropic', patch: { latencyMs: 100, errorStatus: 429 } },
      { at: '30000ms', target: 'anthropic', patch: { latencyMs: 100, errorStatus: 429 } },
      { at: '30000ms', target: 'report', patch: { hang: true } },
      { at: '35000ms', target: 'report', patch: null },
      { at: '40000ms', target: 'anthropic', patch: null },
    ]);
  });

  it('refuses a TIME_SCALE below 1 or not a number', () => {
    for (const k of ['0.5', 'fast']) expect(() => lib.k6Options(rawDefinition('baseline'), { TIME_SCALE: k })).toThrow(/TIME_SCALE/);
  });

  it('scales the client’s retry delays, and has none without retries', () => {
    expect(lib.clientDelaysSec(definitionOnly(rawDefinition('avalanche'), 'avalanche'), 2)).toEqual([0.5, 1, 2, 4]);
    expect(lib.clientDelaysSec(definitionOnly(rawDefinition('baseline'), 'baseline'), 2)).toEqual([]);
  });
});
