import type { PendingAlert } from '../../api/console/alerts.js';
import type { FinishedSeries, OverviewPoint } from '../../api/console/overview.js';
import { Chart } from '../chart.js';
import { ADMISSION_OUTCOMES, FINISHED_ORDER, chartData, finishedNotice, finishedPick, latencyPick, latestFigures, pendingLines } from '../view-models.js';

export const OVERVIEW_REFRESH_MS = 5_000;

/** The charts of the last 15 minutes; the points come from the app's own poll, which also feeds the alert banner. */
export function Overview({ points, finished, pending }: { points: readonly OverviewPoint[]; finished: FinishedSeries; pending: readonly PendingAlert[] }) {
  const notice = finishedNotice(finished);
  return (
    <section>
      <h1>Overview</h1>
      <p class="muted">
        The last 15 minutes, refreshed every {OVERVIEW_REFRESH_MS / 1000} s; the figures are per second over the last minute. Submissions and refusals are those this API instance answered;
        finished runs, end-to-end times and on-time goodput (completed with a real answer, not a stand-in, by the deadline) are every processor's, from Postgres.
      </p>
      {notice && (
        <p class="error" data-testid="finished-unavailable">
          {notice}
        </p>
      )}
      {pending.length > 0 && (
        <ul class="muted" data-testid="pending-alerts">
          {pendingLines(pending, Date.now()).map((line) => <li key={line}>{line}</li>)}
        </ul>
      )}
      <dl class="figures" data-testid="figures">
        {latestFigures(points, finished).map((f) => (
          <div key={f.label}>
            <dt>{f.label}</dt>
            <dd>{f.value}</dd>
          </div>
        ))}
      </dl>
      <div class="charts">
        <Chart title="Submissions per second by admission outcome" unit="/s" chart={chartData(points, (p) => p.admission, ADMISSION_OUTCOMES)} />
        <Chart title="Runs finished per second by status, and completed on time" unit="/s" chart={chartData(finished.points, finishedPick, FINISHED_ORDER)} />
        <Chart title="End-to-end time by class (p50, p99)" unit="s" chart={chartData(finished.points, latencyPick)} />
        <Chart title="Refusals per second by code" unit="/s" chart={chartData(points, (p) => p.refusals)} />
      </div>
    </section>
  );
}
