/**
 * Burrow-style health of a consumer group's partition, judged from a sliding window of offset
 * samples alone (no commit timestamps: Kafka's OffsetFetch does not report when an offset was
 * committed, so "a commit" here is a sample whose committed offset differs from the one before).
 */

export const LAG_STATUSES = ['OK', 'WARN', 'STALL', 'STOP', 'REWIND'] as const;
export type LagStatus = (typeof LAG_STATUSES)[number];

/** The value of `sluice_consumer_partition_status` and `sluice_consumer_group_status`. */
export const STATUS_CODE: Record<LagStatus, number> = { OK: 0, WARN: 1, STALL: 2, STOP: 3, REWIND: 4 };

/**
 * How bad a status is, for the worst partition of a group: a partition that stopped or stalled
 * with work behind it hurts callers; a rewind repeats work but keeps it flowing; a growing lag is
 * a warning. So REWIND ranks below STALL and STOP although its code is higher.
 */
const SEVERITY: Record<LagStatus, number> = { OK: 0, WARN: 1, REWIND: 2, STALL: 3, STOP: 4 };

/** One poll's view of a partition. `committed` is where the group resumes (the low watermark when it never committed). */
export interface OffsetSample {
  /** Epoch ms, the monitor's clock. */
  at: number;
  committed: bigint;
  /** High watermark: the offset the next record written will get. */
  high: bigint;
}

/** Samples a window must hold before a trend is judged: fewer cannot tell a trend from a step. */
export const MIN_SAMPLES = 3;

export interface StatusWindow {
  windowMs: number;
  /** Samples the window must hold before a trend (WARN, STALL) is judged. */
  minSamples: number;
}

/** Records written but not committed; never negative (a committed offset past the end, after a topic was recreated, is no lag). */
export function lagOf(s: Pick<OffsetSample, 'committed' | 'high'>): bigint {
  return s.high > s.committed ? s.high - s.committed : 0n;
}

/**
 * The samples worth keeping at `now`: those inside the window, and the newest one older than
 * it (the anchor), which is what lets STOP say "already so before the window began".
 */
export function retainedSamples(samples: readonly OffsetSample[], now: number, windowMs: number): OffsetSample[] {
  const start = now - windowMs;
  const firstInside = samples.findIndex((s) => s.at >= start);
  if (firstInside === -1) return samples.slice(-1);
  return samples.slice(Math.max(0, firstInside - 1));
}

/**
 * The status of one partition from its samples (oldest first), at `now`. "Stuck" is the run of
 * latest samples that all have the current committed offset and lag > 0: how long the offset has
 * stood still with work behind it, as far as the samples show.
 * - REWIND: a committed offset lower than the sample before it, the later sample inside the window.
 * - STOP: no commit for longer than the window while lag > 0: the stuck run reaches back to the
 *   anchor, a sample older than the window.
 * - STALL: the committed offset has not moved, with lag, across at least half the window: the
 *   stuck run holds at least `minSamples` samples and spans at least `windowMs / 2`.
 * - WARN: the window is full enough (at least `minSamples` samples inside it, spanning at least
 *   half of it) and lag grows across it: every sample's lag ≥ the one before and the last > the
 *   first.
 * - OK otherwise.
 * So STOP and STALL differ in how long the offset has stood still: STALL from half a window (an
 * early signal, also for a new monitor that has seen only part of one), STOP beyond a whole
 * window, which takes a sample from before the window to prove. A stuck partition goes OK → STALL
 * → STOP. A group that caught up (lag 0) is not expected to commit, so a quiet topic is never
 * stuck; records arriving behind a consumer that stopped read WARN while the lag grows, STALL
 * after half a window, STOP after a whole one.
 */
export function partitionStatus(samples: readonly OffsetSample[], now: number, w: StatusWindow): LagStatus {
  const start = now - w.windowMs;
  const kept = retainedSamples(samples, now, w.windowMs);
  const last = kept[kept.length - 1];
  if (!last) return 'OK';

  for (let i = 1; i < kept.length; i++) if (kept[i]!.committed < kept[i - 1]!.committed && kept[i]!.at >= start) return 'REWIND';

  let stuckFrom = kept.length;
  while (stuckFrom > 0 && kept[stuckFrom - 1]!.committed === last.committed && lagOf(kept[stuckFrom - 1]!) > 0n) stuckFrom--;
  const stuck = kept.slice(stuckFrom);
  if (stuck.length > 0 && stuck[0]!.at < start) return 'STOP';
  if (stuck.length >= w.minSamples && last.at - stuck[0]!.at >= w.windowMs / 2) return 'STALL';

  const inside = kept.filter((s) => s.at >= start);
  const full = inside.length >= w.minSamples && last.at - inside[0]!.at >= w.windowMs / 2;
  const lags = inside.map(lagOf);
  const growing = lags.every((l, i) => i === 0 || l >= lags[i - 1]!) && lags[lags.length - 1]! > lags[0]!;
  return full && growing ? 'WARN' : 'OK';
}

/** The worst of some statuses by severity (OK when there are none). */
export function worstStatus(statuses: Iterable<LagStatus>): LagStatus {
  let worst: LagStatus = 'OK';
  for (const s of statuses) if (SEVERITY[s] > SEVERITY[worst]) worst = s;
  return worst;
}

/** What `sluice lag` exits with: 0 all OK, 1 some WARN (nothing worse), 2 STALL, STOP or REWIND. */
export function exitCodeFor(worst: LagStatus): 0 | 1 | 2 {
  if (worst === 'OK') return 0;
  return worst === 'WARN' ? 1 : 2;
}
