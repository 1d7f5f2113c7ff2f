/** Rows replayed per second unless told otherwise: `sluice dlq replay --rate` and the console's replays. */
export const DEFAULT_REPLAY_RATE = 10;

/** Spaces calls `1/rate` seconds apart; the first goes at once. */
export function pacer(ratePerSec: number, now: () => number = Date.now, sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))): () => Promise<void> {
  const intervalMs = 1_000 / ratePerSec;
  let next = -Infinity;
  return async () => {
    const t = now();
    const at = Math.max(next, t);
    next = at + intervalMs;
    if (at > t) await sleep(at - t);
  };
}
