import { useState } from 'preact/hooks';
import type { DependencyReport } from '../../api/console/dependencies.js';
import type { DependencySpend } from '../../api/console/overview.js';
import { del, get, put } from '../api.js';
import { usePolled } from '../hooks.js';
import { dependencyRows, FORCE_MINUTES, forceWarning, type DependencyRow, type ForceAction, type Gauge } from '../dependency-view.js';

/** How often the page reads the dependencies again on its own. */
export const DEPENDENCIES_REFRESH_MS = 2_000;

const ACTION_LABELS: Record<ForceAction, string> = { 'force-open': 'force open…', 'force-closed': 'force closed…', clear: 'clear force…' };

function GaugeLine({ g }: { g: Gauge }) {
  return (
    <div class="gauge">
      <span class="muted">{g.label}</span> <meter min={0} max={1} value={g.use} high={0.8} /> <span>{g.text}</span>
    </div>
  );
}

/** The confirmation every force and clear goes through: what it does, and for how long. */
function Confirm({ row, action, onDone }: { row: DependencyRow; action: ForceAction; onDone: (outcome?: string) => void }) {
  const [minutes, setMinutes] = useState<number>(FORCE_MINUTES[1]);
  const [error, setError] = useState<string>();
  const path = `breakers/${encodeURIComponent(row.dependency)}/force`;
  const confirm = async () => {
    try {
      if (action === 'clear') await del(path);
      else await put(path, { mode: action === 'force-open' ? 'open' : 'closed', durationSec: minutes * 60 });
      onDone(action === 'clear' ? `force on ${row.dependency} cleared` : `${row.dependency} forced ${action === 'force-open' ? 'open' : 'closed'} for ${minutes} min`);
    } catch (err) {
      setError((err as Error).message);
    }
  };
  return (
    <div class="confirm" role="dialog" aria-label={`confirm ${action} of ${row.dependency}`} data-testid="force-confirm">
      <p>{forceWarning(row.dependency, action, minutes)}</p>
      {action !== 'clear' && (
        <label>
          for{' '}
          <select data-testid="force-minutes" value={minutes} onChange={(e) => setMinutes(Number((e.target as HTMLSelectElement).value))}>
            {FORCE_MINUTES.map((m) => <option key={m} value={m}>{m} min</option>)}
          </select>
        </label>
      )}{' '}
      <button class="danger" data-testid="force-confirm-yes" onClick={() => void confirm()}>yes, {ACTION_LABELS[action].replace('…', '')}</button>{' '}
      <button onClick={() => onDone()}>no</button>
      {error && <p class="error">{error}</p>}
    </div>
  );
}

/**
 * Each dependency's breaker (state, window, force), pacing and retry budget, cluster-wide from
 * Redis, read again every few seconds; force a breaker open or closed for a drill, or end the force.
 */
export function DependenciesPage({ onLoggedOut }: { onLoggedOut: () => void }) {
  const { data, error, reload } = usePolled(() => get<{ dependencies: DependencyReport[]; spend: Record<string, DependencySpend> }>('dependencies'), DEPENDENCIES_REFRESH_MS, onLoggedOut);
  const [confirming, setConfirming] = useState<{ dependency: string; action: ForceAction }>();
  const [outcome, setOutcome] = useState<string>();
  const rows = data ? dependencyRows(data.dependencies, data.spend) : [];
  const done = (said?: string) => {
    setConfirming(undefined);
    if (said) setOutcome(said);
    reload();
  };
  return (
    <section>
      <h1>Dependencies</h1>
      {error && <p class="error">{error}</p>}
      {outcome && <p class="muted" data-testid="force-outcome">{outcome}</p>}
      <p class="muted">
        Breakers, pacing and retry budgets are every processor's, from Redis. Calls wasted (on runs that ended without a real answer) and each tenant's share of the turns are the last 15
        minutes of the processors in this process only (every processor's: sluice_provider_calls_wasted_total and sluice_pacing_turns_total in Prometheus).
      </p>
      <table data-testid="dependencies">
        <thead>
          <tr><th>dependency</th><th>breaker</th><th>window</th><th>pacing</th><th>retry budget</th><th>calls wasted</th><th>turn shares</th><th /></tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr key={r.dependency} class={r.tone} data-dependency={r.dependency}>
              <td>{r.dependency} <span class="muted">({r.kind})</span></td>
              <td class="breaker">
                <strong data-testid={`breaker-state-${r.dependency}`}>{r.state}</strong>
                <div class="muted">{r.note}</div>
              </td>
              <td>
                <GaugeLine g={r.failureRate} />
                <GaugeLine g={r.slowCallRate} />
                <div class="muted">{r.window}</div>
              </td>
              <td>{r.pacing.length === 0 ? <span class="muted">not paced</span> : r.pacing.map((g) => <GaugeLine key={g.label} g={g} />)}</td>
              <td><GaugeLine g={r.retryBudget} /></td>
              <td data-testid={`wasted-${r.dependency}`}>{r.wasted}</td>
              <td data-testid={`turn-shares-${r.dependency}`}>{r.turnShares}</td>
              <td class="actions">
                {confirming?.dependency === r.dependency ? (
                  <Confirm row={r} action={confirming.action} onDone={done} />
                ) : (
                  r.actions.map((a) => (
                    <button key={a} class="link" data-testid={`${a}-${r.dependency}`} onClick={() => setConfirming({ dependency: r.dependency, action: a })}>
                      {ACTION_LABELS[a]}
                    </button>
                  ))
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
