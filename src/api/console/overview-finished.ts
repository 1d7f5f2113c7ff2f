import type { Logger } from '../../obs/logger.js';
import type { FinishedRunsRow, FinishedWindow } from '../../status/finished-runs.js';
import { finishedPointsOf, finishedWindow, type FinishedSeries } from './overview.js';

const DEFAULT_WAIT_MS = 1_000;

export interface FinishedRunsSamplerOptions {
  /** The runs that finished in a window, from Postgres; bounded by its own statement timeout. */
  read: (window: FinishedWindow) => Promise<FinishedRunsRow[]>;
  /** The charts' resolution: one read per bucket at most, whatever the number of browsers. */
  bucketMs: number;
  /** How long an Overview request waits for a read in flight before it answers with the last one (1 s). */
  waitMs?: number;
  logger: Pick<Logger, 'warn' | 'info'>;
  now?: () => number;
}

/**
 * The Overview's finished-run charts, read from Postgres `runs` (every processor's runs, not only
 * this process's) when a browser asks and the last read is a bucket old; reads never overlap, and
 * nobody looking means no reads. A read that fails keeps the last points, marked unavailable; a
 * slow one leaves the request with the last points after `waitMs`, so the Overview never waits
 * on Postgres for long nor fails because of it.
 */
export class FinishedRunsSampler {
  private last: FinishedSeries = { points: [], asOf: null, unavailable: null };
  private startedAt = -Infinity;
  private reading: Promise<void> | undefined;
  private readonly now: () => number;

  constructor(private readonly opts: FinishedRunsSamplerOptions) {
    this.now = opts.now ?? Date.now;
  }

  async current(): Promise<FinishedSeries> {
    if (!this.reading && this.now() - this.startedAt >= this.opts.bucketMs) {
      this.startedAt = this.now();
      this.reading = this.readAt(this.startedAt).finally(() => {
        this.reading = undefined;
      });
    }
    if (this.reading) await waitAtMost(this.reading, this.opts.waitMs ?? DEFAULT_WAIT_MS);
    return this.last;
  }

  private async readAt(now: number): Promise<void> {
    const window = finishedWindow(now, this.opts.bucketMs);
    try {
      const points = finishedPointsOf(await this.opts.read(window), window);
      if (this.last.unavailable !== null) this.opts.logger.info('the Overview reads finished runs from Postgres again');
      this.last = { points, asOf: now, unavailable: null };
    } catch (err) {
      const why = (err as Error).message;
      if (this.last.unavailable === null) this.opts.logger.warn({ err }, 'the Overview could not read finished runs from Postgres; it shows the last ones it read');
      this.last = { ...this.last, unavailable: why };
    }
  }
}

/** Resolves when `work` settles or after `ms`, whichever comes first. */
async function waitAtMost(work: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([work, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}
