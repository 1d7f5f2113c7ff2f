import { useState } from 'preact/hooks';
import type { OperatorRunView } from '../../status/run-store.js';
import type { RunEvent } from '../../client/types.js';
import { TERMINAL_RUN_STATUSES } from '../../client/types.js';
import { get, post } from '../api.js';
import { usePolled } from '../hooks.js';
import { filterQuery, runTimeline } from '../view-models.js';

const STATUSES = ['', 'queued', 'running', 'waiting_dependency', 'completed', 'failed', 'expired', 'cancelled', 'dead_lettered'];

function RunDetail({ runId, onLoggedOut }: { runId: string; onLoggedOut: () => void }) {
  const { data, error, reload } = usePolled(() => get<{ run: OperatorRunView; events: RunEvent[] }>(`runs/${encodeURIComponent(runId)}`), 3_000, onLoggedOut, [runId]);
  const [confirming, setConfirming] = useState(false);
  const [outcome, setOutcome] = useState<string>();
  if (error) return <p class="error">{error}</p>;
  if (!data) return <p class="muted">loading…</p>;
  const { run, events } = data;
  const cancel = async () => {
    try {
      await post(`runs/${encodeURIComponent(run.runId)}/cancel`);
      setOutcome('cancellation requested: the run stops before its next step');
    } catch (err) {
      setOutcome((err as Error).message);
    }
    setConfirming(false);
    reload();
  };
  return (
    <article class="run" data-testid="run-detail">
      <h2>Run {run.runId}</h2>
      <dl class="facts">
        <dt>tenant</dt><dd>{run.tenantId}</dd>
        <dt>workflow</dt><dd>{run.workflow} ({run.class})</dd>
        <dt>status</dt><dd data-testid="run-status">{run.status}: {run.statusMessage}</dd>
        <dt>admitted</dt><dd>{run.admittedAt}</dd>
        <dt>deadline</dt><dd>{run.deadline}</dd>
        <dt>attempts</dt><dd>{run.attempts}</dd>
        {run.error && (<><dt>error</dt><dd>{run.error.code}: {run.error.message}</dd></>)}
        {run.usage && (<><dt>tokens</dt><dd>{run.usage.inputTokens} in, {run.usage.outputTokens} out, {run.usage.llmCalls} LLM calls, {run.usage.costUsd === null ? 'cost unknown' : `$${run.usage.costUsd.toFixed(4)}`}</dd></>)}
      </dl>
      {!TERMINAL_RUN_STATUSES.has(run.status) &&
        (confirming ? (
          <p>
            Cancel run {run.runId.slice(0, 8)}? <button class="danger" data-testid="confirm-cancel" onClick={cancel}>yes, cancel it</button> <button onClick={() => setConfirming(false)}>no</button>
          </p>
        ) : (
          <button class="danger" data-testid="cancel-run" onClick={() => setConfirming(true)}>cancel run…</button>
        ))}
      {outcome && <p class="notice">{outcome}</p>}
      <h3>Timeline</h3>
      <ol class="timeline" data-testid="timeline">
        {runTimeline(events).map((t) => (
          <li key={t.at + t.status} class={t.tone}>
            <time>{new Date(t.at).toLocaleTimeString()}</time> <strong>{t.status}</strong> {t.label} {t.after && <span class="muted">+{t.after}</span>}
          </li>
        ))}
      </ol>
    </article>
  );
}

export function RunsPage({ onLoggedOut, selected, onSelect }: { onLoggedOut: () => void; selected: string | undefined; onSelect: (runId: string | undefined) => void }) {
  const [filter, setFilter] = useState<Record<string, string>>({ runId: '', tenant: '', workflow: '', status: '', since: '' });
  const [query, setQuery] = useState('');
  const { data, error } = usePolled(() => get<{ runs: OperatorRunView[]; limit: number }>(`runs?${query}`), 10_000, onLoggedOut, [query]);
  const field = (name: string, label: string, type = 'text') => (
    <label>
      {label}
      <input name={name} type={type} value={filter[name]} onInput={(e) => setFilter({ ...filter, [name]: (e.target as HTMLInputElement).value })} />
    </label>
  );
  return (
    <section>
      <h1>Runs</h1>
      <form class="filters" onSubmit={(e) => (e.preventDefault(), setQuery(filterQuery(filter)))}>
        {field('runId', 'run id')}
        {field('tenant', 'tenant')}
        {field('workflow', 'workflow')}
        <label>
          status
          <select name="status" value={filter.status} onChange={(e) => setFilter({ ...filter, status: (e.target as HTMLSelectElement).value })}>
            {STATUSES.map((s) => <option key={s} value={s}>{s || 'any'}</option>)}
          </select>
        </label>
        {field('since', 'admitted since', 'datetime-local')}
        <button type="submit">find</button>
      </form>
      {error && <p class="error">{error}</p>}
      {selected && <RunDetail runId={selected} onLoggedOut={onLoggedOut} />}
      <table data-testid="runs">
        <thead>
          <tr><th>run</th><th>tenant</th><th>workflow</th><th>class</th><th>status</th><th>admitted</th><th>attempts</th></tr>
        </thead>
        <tbody>
          {data?.runs.map((r) => (
            <tr key={r.runId} class={r.runId === selected ? 'selected' : ''}>
              <td><a href={`#/runs/${r.runId}`} onClick={() => onSelect(r.runId)}>{r.runId.slice(0, 8)}…</a></td>
              <td>{r.tenantId}</td><td>{r.workflow}</td><td>{r.class}</td><td>{r.status}</td><td>{new Date(r.admittedAt).toLocaleString()}</td><td class="num">{r.attempts}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {data && data.runs.length === data.limit && <p class="muted">the newest {data.limit}; narrow the filter for others</p>}
      {data && data.runs.length === 0 && <p class="muted">no runs match</p>}
    </section>
  );
}
