import { lagOf, type OffsetSample } from './lag-status.js';

/**
 * Where a partition's time lag came from:
 * - `caught-up`: no lag, so 0 s;
 * - `record`: now − the timestamp of the record at the committed offset (exact: Sluice's topics
 *   stamp records with the broker's append time);
 * - `interpolated`: that record could not be read (deleted by retention, or not read in time), so
 *   the time it was written is estimated from the window's samples (below).
 */
export type TimeLagSource = 'caught-up' | 'record' | 'interpolated';

export interface TimeLag {
  seconds: number;
  source: TimeLagSource;
}

/**
 * When the record at `offset` was written, estimated from samples of the high watermark (oldest
 * first): it was written after the last sample whose high watermark was ≤ `offset` and by the
 * first whose high watermark was > `offset`; between the two, records are taken to have arrived
 * at an even rate. Before the oldest sample the estimate is that sample's time, so the lag it
 * gives is a lower bound (the record is older than anything the window saw). Undefined when no
 * sample's high watermark passed `offset` (the record does not exist yet).
 */
export function estimateWrittenAt(samples: readonly Pick<OffsetSample, 'at' | 'high'>[], offset: bigint): number | undefined {
  const i = samples.findIndex((s) => s.high > offset);
  if (i === -1) return undefined;
  const after = samples[i]!;
  if (i === 0) return after.at;
  const before = samples[i - 1]!;
  // (offset + 1 − before.high) of the (after.high − before.high) records written between the two.
  const share = Number(offset + 1n - before.high) / Number(after.high - before.high);
  return before.at + share * (after.at - before.at);
}

/**
 * A partition's time lag at `now`, from its latest sample: 0 without lag; from the record's
 * timestamp when it was read; else interpolated from the samples. Never negative (the broker's
 * clock may run ahead of the monitor's).
 */
export function timeLag(latest: Pick<OffsetSample, 'committed' | 'high'>, recordTimestamp: number | undefined, samples: readonly Pick<OffsetSample, 'at' | 'high'>[], now: number): TimeLag {
  if (lagOf(latest) === 0n) return { seconds: 0, source: 'caught-up' };
  const since = (at: number) => Math.max(0, now - at) / 1000;
  if (recordTimestamp !== undefined) return { seconds: since(recordTimestamp), source: 'record' };
  return { seconds: since(estimateWrittenAt(samples, latest.committed) ?? now), source: 'interpolated' };
}
