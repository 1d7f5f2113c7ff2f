/**
 * The arithmetic of the in-flight and footprint benches (inflight-bench.ts, footprint-bench.ts),
 * kept pure so it is unit-tested: counter deltas, percentiles, the throughput ratio.
 */

/** Named counters read twice (commands, topics, tables): what grew, largest first. */
export function counterDelta(before: ReadonlyMap<string, number>, after: ReadonlyMap<string, number>): [string, number][] {
  const out: [string, number][] = [];
  for (const [name, n] of after) {
    const d = n - (before.get(name) ?? 0);
    if (d > 0) out.push([name, d]);
  }
  return out.sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
}

/** `delta` less `idle` (a rate per second over an idle window) scaled to `windowSec`; nothing goes below 0. */
export function lessIdle(delta: [string, number][], idlePerSec: ReadonlyMap<string, number>, windowSec: number): [string, number][] {
  return delta
    .map(([name, n]): [string, number] => [name, Math.max(0, n - (idlePerSec.get(name) ?? 0) * windowSec)])
    .filter(([, n]) => n > 0)
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
}

/** `INFO commandstats`: calls per command. */
export function parseCommandStats(info: string): Map<string, number> {
  const calls = new Map<string, number>();
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(m[1]!, Number(m[2]));
  return calls;
}

/** A numeric `field:value` line of an INFO section (whole or decimal, as used_cpu_user is). */
export function infoField(info: string, field: string): number {
  const m = new RegExp(`^${field}:(\\d+(?:\\.\\d+)?)`, 'm').exec(info);
  if (!m) throw new Error(`INFO has no ${field}`);
  return Number(m[1]);
}

/** Nearest-rank percentile (p in 0..100) of the values; NaN for none. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

export const median = (values: readonly number[]) => percentile(values, 50);

export interface ThroughputFigure {
  /** Runs finished per second in the measured window. */
  achievedPerSec: number;
  /** Runs that can run at once (the smaller of the in-flight total and the binding cap) over one run's simulated latency. */
  idealPerSec: number;
  ratio: number;
}

/**
 * Little's law: with `concurrent` runs always in flight and each taking `runTimeMs` of simulated
 * latency, `concurrent / runTime` runs finish per second; the achieved rate is measured against it.
 */
export function throughputFigure(finished: number, windowSec: number, concurrent: number, runTimeMs: number): ThroughputFigure {
  if (windowSec <= 0 || runTimeMs <= 0) throw new Error('window and run time must be positive');
  const achievedPerSec = finished / windowSec;
  const idealPerSec = concurrent / (runTimeMs / 1000);
  return { achievedPerSec, idealPerSec, ratio: achievedPerSec / idealPerSec };
}

/** The total in flight split over processors as evenly as whole numbers allow (the first ones take the remainder). */
export function splitInFlight(total: number, processors: number): number[] {
  if (!Number.isInteger(total) || !Number.isInteger(processors) || processors < 1 || total < processors) throw new Error(`cannot split ${total} runs over ${processors} processors`);
  const base = Math.floor(total / processors);
  return Array.from({ length: processors }, (_, i) => base + (i < total % processors ? 1 : 0));
}

/** Bytes a run in flight costs: memory under load less memory idle, over the runs in flight. */
export function bytesPerRun(idleBytes: number, loadedBytes: number, inFlight: number): number {
  return inFlight > 0 ? (loadedBytes - idleBytes) / inFlight : Number.NaN;
}

/** Sum of the partitions' end offsets per topic, from kafkajs's fetchTopicOffsets answers. */
export function endOffsetsByTopic(topics: Record<string, readonly { high: string }[]>): Map<string, number> {
  return new Map(Object.entries(topics).map(([topic, partitions]) => [topic, partitions.reduce((sum, p) => sum + Number(p.high), 0)]));
}

/**
 * The Redis Cluster slot group a key belongs to: its hash tag with the namespace left out, and
 * per-run tags (a UUID) folded into one `{run}`, so the groups name where load concentrates.
 */
export function slotGroup(key: string, namespace: string): string {
  const open = key.indexOf('{');
  const close = open < 0 ? -1 : key.indexOf('}', open + 1);
  if (close <= open + 1) return '(no hash tag)';
  const tag = key.slice(open + 1, close);
  const bare = tag.startsWith(`${namespace}sluice:`) ? tag.slice(namespace.length + 'sluice:'.length) : tag;
  return /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(bare) ? '{run}' : `{${bare}}`;
}

/** The first key a command names: EVALSHA's after its key count, anything else's first argument. */
export function firstKey(args: readonly string[]): string | undefined {
  const cmd = args[0]?.toLowerCase();
  if (cmd === 'evalsha' || cmd === 'eval') return Number(args[2]) > 0 ? args[3] : undefined;
  return args[1];
}

// Prometheus text read by the in-flight bench: one processor's /metrics at both ends of a window.

/** Sum of a sample over its label sets, or over those whose labels contain `labels` (e.g. `dependency="anthropic"`). */
export function promSum(text: string, name: string, labels = ''): number {
  let sum = 0;
  for (const m of text.matchAll(new RegExp(`^${name}(?:\\{([^}]*)\\})? (\\S+)$`, 'gm'))) if ((m[1] ?? '').includes(labels)) sum += Number(m[2]);
  return sum;
}

/** Mean of a histogram over the window, in ms, from its _sum and _count at both ends. */
export function windowMeanMs(first: string, last: string, name: string, labels = ''): number {
  const d = (suffix: string) => promSum(last, `${name}_${suffix}`, labels) - promSum(first, `${name}_${suffix}`, labels);
  return (d('sum') * 1000) / d('count');
}

/** A counter summed by one of its labels: runs finished by status, run retries by reason. */
export function byLabel(text: string, name: string, label: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of text.matchAll(new RegExp(`^${name}\\{(?:[^}]*,)?${label}="([^"]+)"[^}]*\\} (\\S+)$`, 'gm'))) out.set(m[1]!, (out.get(m[1]!) ?? 0) + Number(m[2]));
  return out;
}

/** How much each label value of a counter grew over the window, over every processor. */
export function windowByLabel(first: string[], last: string[], name: string, label: string): Record<string, number> {
  const out: Record<string, number> = {};
  last.forEach((t, i) => {
    const before = byLabel(first[i]!, name, label);
    for (const [value, n] of byLabel(t, name, label)) if (n > (before.get(value) ?? 0)) out[value] = (out[value] ?? 0) + n - (before.get(value) ?? 0);
  });
  return out;
}

/** Per label value, the largest count any one processor reported. */
export function mostSeen(perProcessor: Record<string, number>[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const counts of perProcessor) for (const [k, n] of Object.entries(counts)) out[k] = Math.max(out[k] ?? 0, n);
  return out;
}
