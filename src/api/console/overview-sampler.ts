import type { Metrics } from '../../obs/metrics.js';
import { repeatEvery } from '../../util/repeat-every.js';
import { OVERVIEW_SPAN_MS, tallyOf, type Tally } from './overview.js';

/**
 * Takes a Tally of this process's registry every `sampleMs` and keeps the last 15 minutes of them
 * (one more, so the oldest point has a tally before it). In memory: a restarted API starts its
 * admission charts empty, and each API instance charts the submissions it answered. The
 * finished-run charts come from Postgres instead (overview-finished.ts).
 */
export class OverviewSampler {
  private readonly tallies: Tally[] = [];
  private stopTimer: (() => void) | undefined;

  constructor(
    private readonly metrics: Pick<Metrics, 'registry'>,
    private readonly sampleMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  start(): void {
    // A sample that fails is a gap in the charts.
    this.stopTimer = repeatEvery(this.sampleMs, () => this.take());
  }

  stop(): void {
    this.stopTimer?.();
  }

  history(): readonly Tally[] {
    return this.tallies;
  }

  async take(): Promise<void> {
    this.tallies.push(tallyOf(await this.metrics.registry.getMetricsAsJSON(), this.now()));
    const keep = Math.ceil(OVERVIEW_SPAN_MS / this.sampleMs) + 1;
    if (this.tallies.length > keep) this.tallies.splice(0, this.tallies.length - keep);
  }
}
