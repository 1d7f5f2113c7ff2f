import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/**
 * The folders of src/ in layers, lowest first. A file may import files of its own folder and of
 * folders in lower layers; never a folder of its own layer (siblings do not know each other) nor
 * one above it. So no import cycle can run between folders, and a reader can take the layers in
 * this order: each is understood from those below it.
 *
 * - util: helpers that know nothing of Sluice.
 * - config, obs, client: the validated configuration (and the workflow helpers over it); logs and
 *   metrics; the HTTP client library the package exports, which knows the API only by its contract
 *   (docs/contract.md), so that a caller's program loads nothing of the server.
 * - events, redis, db: the wire format; Redis keys and scripts; Postgres pools, errors and
 *   isolated writes.
 * - kafka: clients, topics, and the one consumer factory and batch-sink loop every consumer uses
 *   (which decode events and write through db).
 * - runs, steps, producers: a run's identity, deadline, status sequence and cancellation; one call
 *   to a step's dependency (LLM, tool) and how it fails; producing events to Kafka, and the Kafka
 *   producer library the package exports (`sluice/producer`: it needs the codec and Kafka, which
 *   the HTTP client's layer may not import).
 * - dlq, permits, breakers, pacing: dead letters; concurrency permits; the shared circuit breakers;
 *   the shared rate limits of dependency calls.
 * - retries, admission, status: retry policy, budget and the retry topic (whose unreadable records
 *   are dead-lettered); the admission decision at the door; status records and the run store.
 * - execution: one attempt of a run, step by step, to its published outcome.
 * - lag: the lag monitor (consumer lag, group status, cluster-wide backlog and waiting runs).
 * - processors: reading work from Kafka and dispatching it to execution under permits and breakers.
 * - api, dev, ingress: Sluice's HTTP API; the Kafka ingress (producers' run requests, admitted as
 *   the API admits them); the development tooling the product starts (the provider
 *   simulator, local Kafka, Redis and Postgres), which needs only config, logs and helpers.
 * - roles: starting the configured roles with shared clients.
 * - cli: the `sluice` command.
 * - dev/bench: benchmarks, which may start any of the above. They live in src/dev but are a layer
 *   of their own: nothing in the product reaches them.
 * - console: the operations console's browser code, bundled apart (vite); it knows the server only
 *   by the types of the JSON it reads, and nothing on the server reaches it.
 */
const LAYERS: readonly (readonly string[])[] = [
  ['util'],
  ['config', 'obs', 'client'],
  ['events', 'redis', 'db'],
  ['kafka'],
  ['runs', 'steps', 'producers'],
  ['dlq', 'permits', 'breakers', 'pacing'],
  ['retries', 'admission', 'status'],
  ['execution', 'lag'],
  ['processors'],
  ['api', 'dev', 'ingress'],
  ['roles'],
  ['cli'],
  ['dev/bench'],
  ['console'],
];

const SRC = fileURLToPath(new URL('../../../src/', import.meta.url));

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(full);
    return e.name.endsWith('.ts') ? [full] : [];
  });
}

/** Each source file (relative to src/) with the source files it imports, type-only and re-exports included. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of sourceFiles(SRC)) {
    const { importedFiles } = ts.preProcessFile(fs.readFileSync(file, 'utf8'), true, true);
    const targets = importedFiles
      .map((f) => f.fileName)
      .filter((spec) => spec.startsWith('.'))
      .map((spec) => path.relative(SRC, path.resolve(path.dirname(file), spec.replace(/\.js$/, '.ts'))));
    graph.set(path.relative(SRC, file), targets);
  }
  return graph;
}

/** The layer unit a file belongs to: its top folder of src/, except the benchmarks inside src/dev. */
function folderOf(file: string): string {
  const [top, sub] = file.split(path.sep);
  return top === 'dev' && sub === 'bench' ? 'dev/bench' : top!;
}

function layerOf(folder: string): number {
  return LAYERS.findIndex((layer) => layer.includes(folder));
}

/** Imports from one folder into another that is not in a lower layer. */
function upwardImports(graph: ReadonlyMap<string, readonly string[]>, layers: (folder: string) => number): { from: string; to: string }[] {
  const found: { from: string; to: string }[] = [];
  for (const [from, targets] of graph) {
    for (const to of targets) {
      if (folderOf(from) !== folderOf(to) && layers(folderOf(to)) >= layers(folderOf(from))) found.push({ from, to });
    }
  }
  return found;
}

/** Every cycle's files in import order, found by depth-first search (each cycle reported once per entry point). */
function importCycles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const cycles: string[][] = [];
  const done = new Set<string>();
  const onPath: string[] = [];
  const visit = (file: string): void => {
    const at = onPath.indexOf(file);
    if (at >= 0) {
      cycles.push([...onPath.slice(at), file]);
      return;
    }
    if (done.has(file)) return;
    onPath.push(file);
    for (const next of graph.get(file) ?? []) visit(next);
    onPath.pop();
    done.add(file);
  };
  for (const file of graph.keys()) visit(file);
  return cycles;
}

describe('import layers of src/', () => {
  const graph = importGraph();

  it('places every folder of src/ in exactly one layer', () => {
    const folders = new Set([...graph.keys()].map(folderOf));
    expect([...folders].filter((f) => layerOf(f) < 0), 'folders to add to LAYERS').toEqual([]);
    expect([...folders].filter((f) => LAYERS.flat().filter((l) => l === f).length > 1)).toEqual([]);
    expect(LAYERS.flat().filter((f) => !folders.has(f)), 'folders that no longer exist').toEqual([]);
  });

  it('imports only from lower layers', () => {
    const upward = upwardImports(graph, layerOf);
    expect(upward.map((i) => `${i.from} → ${i.to}`)).toEqual([]);
  });


  it('has no import cycle between files', () => {
    expect(importCycles(graph).map((c) => c.join(' → '))).toEqual([]);
  });
});

describe('the layer checks themselves', () => {
  const graph = new Map([
    ['low/a.ts', []],
    ['mid/b.ts', ['low/a.ts']],
    ['mid/c.ts', ['mid/b.ts']],
    ['side/d.ts', ['mid/b.ts']],
    ['top/e.ts', ['mid/c.ts', 'side/d.ts']],
  ]);
  const layers = (f: string) => ({ low: 0, mid: 1, side: 1, top: 2 })[f] ?? -1;

  it('allows imports within a folder and downwards', () => {
    expect(upwardImports(graph, layers)).toEqual([{ from: 'side/d.ts', to: 'mid/b.ts' }]);
  });

  it('reports an import back up', () => {
    const up = new Map([...graph, ['low/a.ts', ['top/e.ts']]]);
    expect(upwardImports(up, layers)).toContainEqual({ from: 'low/a.ts', to: 'top/e.ts' });
  });

  it('finds a cycle, and none in a graph without one', () => {
    expect(importCycles(graph)).toEqual([]);
    const cyclic = new Map([...graph, ['low/a.ts', ['mid/c.ts']]]);
    expect(importCycles(cyclic)).toEqual([['low/a.ts', 'mid/c.ts', 'mid/b.ts', 'low/a.ts']]);
  });
});
