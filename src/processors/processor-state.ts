import { isRecord } from '../util/is-record.js';
import type { HeldCount } from './breaker-holds.js';

/** Why a processor holds a partition paused: its read-ahead buffer is full, or all its buffered work waits for open dependencies. */
export type PauseReason = 'buffer_full' | 'breaker_open';

export interface PausedPartition {
  topic: string;
  partition: number;
  reason: PauseReason;
}

/** How often each processor publishes its state: the most the console's figures lag behind. */
export const PROCESSOR_STATE_EVERY_MS = 2_000;

/** A processor's entry lapses this long after its last publication: a dead processor's state vanishes with it. */
export const PROCESSOR_STATE_TTL_MS = 3 * PROCESSOR_STATE_EVERY_MS;

/**
 * Paused partitions one processor names in its entry; beyond these it gives only how many per
 * reason, so an entry stays small however many partitions a processor owns.
 */
export const MAX_LISTED_PAUSED = 256;

/** What one processor publishes of itself, for the console. */
export interface ProcessorState {
  /** Per permit scope, when its longest waiter began to wait (ms on this process's clock). */
  oldest: ReadonlyMap<string, number>;
  paused: readonly PausedPartition[];
  held: readonly HeldCount[];
}

/**
 * The part of an entry processor-state-publish.lua stores as it is given (it adds when the entry
 * lapses and when each scope's waiter began to wait). A field is left out when it has nothing.
 */
export interface PublishedParts {
  /** Paused partitions per reason, and the first MAX_LISTED_PAUSED of them by topic and partition as [topic, partition, reason]. */
  paused?: { counts: Partial<Record<PauseReason, number>>; listed: [string, number, PauseReason][] };
  /** Held runs per dependency, then tenant (classes summed). */
  held?: Record<string, Record<string, number>>;
}

export function isIdle(state: ProcessorState): boolean {
  return state.oldest.size === 0 && state.paused.length === 0 && !state.held.some((h) => h.runs > 0);
}

export function publishedParts(state: Pick<ProcessorState, 'paused' | 'held'>): PublishedParts {
  const parts: PublishedParts = {};
  if (state.paused.length > 0) {
    const counts: Partial<Record<PauseReason, number>> = {};
    for (const p of state.paused) counts[p.reason] = (counts[p.reason] ?? 0) + 1;
    // In order, so the same partitions are named from one publication to the next.
    const listed = [...state.paused].sort((a, b) => (a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.partition - b.partition)).slice(0, MAX_LISTED_PAUSED);
    parts.paused = { counts, listed: listed.map((p): [string, number, PauseReason] => [p.topic, p.partition, p.reason]) };
  }
  const held: Record<string, Record<string, number>> = {};
  for (const { dependency, tenant, runs } of state.held) {
    if (runs <= 0) continue;
    const tenants = (held[dependency] ??= {});
    tenants[tenant] = (tenants[tenant] ?? 0) + runs;
  }
  if (Object.keys(held).length > 0) parts.held = held;
  return parts;
}

/** Partitions paused for one reason, across every live processor. */
export interface PausedPartitions {
  reason: string;
  /** How many, summed over the processors (one moved between two in a rebalance may count twice for a period). */
  partitions: number;
  /** Processors holding any paused for this reason. */
  processors: number;
  /** The ones the processors named, by topic, partitions ascending. */
  topics: { topic: string; partitions: number[] }[];
  /** The ones left unnamed beyond a processor's MAX_LISTED_PAUSED. */
  unlisted: number;
}

/** Runs held for one dependency across every live processor, and by tenant. */
export interface HeldRuns {
  dependency: string;
  runs: number;
  tenants: Record<string, number>;
}

/** Every live processor's published state, merged. */
export interface ClusterProcessorState {
  /** Per scope, seconds its longest waiter has waited, across every processor. */
  oldestWaitingSec: Map<string, number>;
  paused: PausedPartitions[];
  held: HeldRuns[];
}

const count = (v: unknown): number | undefined => (typeof v === 'number' && Number.isInteger(v) && v > 0 ? v : undefined);

function earliestStarts(since: Record<string, unknown>, into: Map<string, number>): void {
  for (const [scope, at] of Object.entries(since)) {
    if (typeof at !== 'number') continue;
    const earliest = into.get(scope);
    if (earliest === undefined || at < earliest) into.set(scope, at);
  }
}

function addPaused(paused: Record<string, unknown>, into: Map<string, { partitions: number; processors: number; named: Map<string, Set<number>>; listed: number }>): void {
  if (!isRecord(paused.counts)) return;
  const listed = Array.isArray(paused.listed) ? paused.listed : [];
  for (const [reason, n] of Object.entries(paused.counts)) {
    const partitions = count(n);
    if (partitions === undefined) continue;
    const merged = into.get(reason) ?? { partitions: 0, processors: 0, named: new Map(), listed: 0 };
    merged.partitions += partitions;
    merged.processors++;
    let named = 0;
    for (const p of listed) {
      if (!Array.isArray(p) || p[2] !== reason || typeof p[0] !== 'string' || typeof p[1] !== 'number') continue;
      const set = merged.named.get(p[0]) ?? new Set<number>();
      set.add(p[1]);
      merged.named.set(p[0], set);
      named++;
    }
    merged.listed += Math.min(named, partitions);
    into.set(reason, merged);
  }
}

function addHeld(held: Record<string, unknown>, into: Map<string, HeldRuns>): void {
  for (const [dependency, tenants] of Object.entries(held)) {
    if (!isRecord(tenants)) continue;
    for (const [tenant, n] of Object.entries(tenants)) {
      const runs = count(n);
      if (runs === undefined) continue;
      const merged = into.get(dependency) ?? { dependency, runs: 0, tenants: {} };
      merged.runs += runs;
      merged.tenants[tenant] = (merged.tenants[tenant] ?? 0) + runs;
      into.set(dependency, merged);
    }
  }
}

const byName = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * Every live entry of the processor-state hash (see processor-state-publish.lua) merged at `now`:
 * per scope the longest wait, paused partitions per reason, held runs summed per dependency and
 * tenant. Lapsed and unreadable entries count for nothing, and so do unreadable parts of one.
 */
export function mergeProcessorStates(entries: Readonly<Record<string, string>>, now: number): ClusterProcessorState {
  const since = new Map<string, number>();
  const paused = new Map<string, { partitions: number; processors: number; named: Map<string, Set<number>>; listed: number }>();
  const held = new Map<string, HeldRuns>();
  for (const text of Object.values(entries)) {
    let entry: unknown;
    try {
      entry = JSON.parse(text);
    } catch {
      continue;
    }
    if (!isRecord(entry) || typeof entry.until !== 'number' || entry.until <= now) continue;
    if (isRecord(entry.since)) earliestStarts(entry.since, since);
    if (isRecord(entry.paused)) addPaused(entry.paused, paused);
    if (isRecord(entry.held)) addHeld(entry.held, held);
  }
  return {
    // A failover to a replica whose clock is behind could put a start after now.
    oldestWaitingSec: new Map([...since].map(([scope, at]) => [scope, Math.max(0, now - at) / 1000])),
    paused: [...paused]
      .sort(([a], [b]) => byName(a, b))
      .map(([reason, p]) => ({
        reason,
        partitions: p.partitions,
        processors: p.processors,
        topics: [...p.named].sort(([a], [b]) => byName(a, b)).map(([topic, partitions]) => ({ topic, partitions: [...partitions].sort((a, b) => a - b) })),
        unlisted: p.partitions - p.listed,
      })),
    held: [...held.values()].sort((a, b) => byName(a.dependency, b.dependency)),
  };
}
