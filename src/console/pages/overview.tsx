import type { PendingAlert } from '../../api/console/alerts.js';
import type { OverviewPoint } from '../../api/console/overview.js';
import { Chart } from '../chart.js';
import { ADMISSION_OUTCOMES, chartData, latencyPick, latestFigures, pendingLines } from '../view-models.js';

export const OVERVIEW_REFRESH_MS = 5_000;

/** The charts of the last 15 minutes; the points come from the app's own poll, which also feeds the alert banner. */
export function Overview({ points, pending }: { points: readonly OverviewPoint[]; pending: readonly PendingAlert[] }) {
  return (
    <section>
      <h1>Overview</h1>
      <p class="muted">The last 15 minutes as this API instance counts them, refreshed every {OVERVIEW_REFRESH_MS / 1000} s; the figures are per second over the last minute.</p>
      {pending.length > 0 && (
        <ul class="muted" data-testid="pending-alerts">
          {pendingLines(pending, Date.now()).map((line) => <li key={line}>{line}</li>)}
        </ul>
      )}
      <dl class="figures" data-testid="figures">
        {latestFigures(points).map((f) => (
          <div key={f.label}>
            <dt>{f.label}</dt>
            <dd>{f.value}</dd>
          </div>
        ))}
      </dl>
      <div class="charts">
        <Chart title="Submissions per second by admission outcome" unit="/s" chart={chartData(points, (p) => p.admission, ADMISSION_OUTCOMES)} />
        <Chart title="Runs finished per second by status" unit="/s" chart={chartData(points, (p) => p.finished, ['completed', 'failed', 'expired', 'cancelled', 'dead_lettered'])} />
        <Chart title="End-to-end time by class (p50, p99)" unit="s" chart={chartData(points, latencyPick)} />
        <Chart title="Refusals per second by code" unit="/s" chart={chartData(points, (p) => p.refusals)} />
      </div>
    </section>
  );
}
