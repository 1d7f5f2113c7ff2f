import type { Counter } from 'prom-client';
import { withTimeout } from '../util/with-timeout.js';

/** A read from a dependency that fills some gauges at scrape time. */
export interface ScrapeCollector<T> {
  /** The `collector` label of `sluice_scrape_errors_total`: a fixed name, never request data. */
  name: string;
  read: () => Promise<T>;
  /** Sets the gauges from what was read. */
  show: (value: T) => void;
  /** Clears the gauges, so a scrape without a fresh read shows none rather than stale values. */
  omit: () => void;
}

export interface CollectorFailure {
  collector: string;
  err: unknown;
}

/** A scrape must not wait on a dependency for long: Prometheus times out the whole scrape. */
export const SCRAPE_READ_TIMEOUT_MS = 1_000;

/**
 * The reads behind gauges that live in a dependency (Redis), run before each `/metrics` render.
 * prom-client renders every metric in one Promise.all, so a gauge whose own collect() throws fails
 * the whole scrape; here each read is bounded in time, and one that fails or times out omits only
 * its own gauges and counts in `sluice_scrape_errors_total`, before the render, so the scrape that
 * failed already shows it.
 */
export class ScrapeCollectors {
  private readonly collectors: (() => Promise<CollectorFailure | undefined>)[] = [];
  private round: Promise<CollectorFailure[]> | undefined;

  constructor(
    private readonly errors: Counter<'collector'>,
    private readonly timeoutMs = SCRAPE_READ_TIMEOUT_MS,
  ) {}

  add<T>(c: ScrapeCollector<T>): void {
    // The series exists from the start, so an increase is visible from the first failure on.
    this.errors.inc({ collector: c.name }, 0);
    this.collectors.push(async () => {
      let value: T;
      try {
        value = await withTimeout(c.read(), this.timeoutMs, `the ${c.name} scrape read`);
      } catch (err) {
        c.omit();
        this.errors.inc({ collector: c.name });
        return { collector: c.name, err };
      }
      // Shown only when in time: a late read must not overwrite what the next scrape decides.
      c.show(value);
      return undefined;
    });
  }

  /** Runs every read once; scrapes that arrive meanwhile share the round. Answers what failed. */
  collect(): Promise<CollectorFailure[]> {
    this.round ??= Promise.all(this.collectors.map((run) => run()))
      .then((outcomes) => outcomes.filter((o): o is CollectorFailure => o !== undefined))
      .finally(() => {
        this.round = undefined;
      });
    return this.round;
  }
}
