import { useState } from 'preact/hooks';
import type { BackpressureGauges } from '../../api/console/backpressure.js';
import type { LimitView } from '../../api/routes/admin-limits.js';
import type { PublishedReport } from '../../lag/lag-monitor.js';
import { get, put } from '../api.js';
import { usePolled } from '../hooks.js';
import { heldTenants, lagRows, parseLimit, pausedCount, pausedPartitionList, pausedWhy, permitRows, type PermitRow } from '../view-models.js';

type Backpressure = BackpressureGauges & {
  lag: { report: PublishedReport | null; why: string | null };
  waitingForDependency: { counts: { tenant: string; runClass: string; runs: number }[] | null; why: string | null };
};

function LimitEditor({ row, onChanged }: { row: PermitRow; onChanged: () => void }) {
  const [text, setText] = useState(String(row.limit));
  const [editing, setEditing] = useState(false);
  const [error, setError] = useState<string>();
  if (!row.edit) return <span>{row.limit}</span>;
  if (!editing)
    return (
      <button class="link" data-testid={`edit-${row.scope}`} onClick={() => (setText(String(row.limit)), setEditing(true))} title="change this limit">
        {row.limit} ✎
      </button>
    );
  const save = async (e: Event) => {
    e.preventDefault();
    const parsed = parseLimit(text);
    if ('error' in parsed) return setError(parsed.error);
    try {
      await put<LimitView>('limits', { ...row.edit, limit: parsed.limit });
      setEditing(false);
      setError(undefined);
      onChanged();
    } catch (err) {
      setError((err as Error).message);
    }
  };
  return (
    <form class="inline" onSubmit={save}>
      <input aria-label={`limit of ${row.scope}`} data-testid={`limit-${row.scope}`} value={text} onInput={(e) => setText((e.target as HTMLInputElement).value)} size={7} />
      <button type="submit">save</button>
      <button type="button" onClick={() => setEditing(false)}>cancel</button>
      {error && <span class="error">{error}</span>}
    </form>
  );
}

export function BackpressurePage({ onLoggedOut }: { onLoggedOut: () => void }) {
  const state = usePolled(() => get<Backpressure>('backpressure'), 5_000, onLoggedOut);
  const limits = usePolled(() => get<{ limits: LimitView[] }>('limits'), 15_000, onLoggedOut);
  const reload = () => (state.reload(), limits.reload());
  const bp = state.data;
  const rows = bp ? permitRows(bp.permits, limits.data?.limits ?? [], bp.processorState.why === null) : [];
  // Whether every processor's published state was read: only then does an empty list mean none.
  const known = bp?.processorState.why === null;
  return (
    <section>
      <h1>Backpressure</h1>
      {state.error && <p class="error">{state.error}</p>}
      <h2>Permits in use per scope</h2>
      {bp && bp.permits.length === 0 && <p class="muted">the permits could not be read from Redis just now</p>}
      {bp?.processorState.why && <p class="muted">the processors' oldest waiters, paused partitions and held runs are unknown: {bp.processorState.why}</p>}
      <table data-testid="permits">
        <thead>
          <tr><th>scope</th><th>in use</th><th>limit</th><th>usage</th><th title={`how long the longest-waiting run (for its run permits) or call (for a dependency's permit) needing this scope has waited, across every processor, as they publish it every ${bp?.processorState.everySec ?? '?'} s`}>oldest waiter</th></tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr key={r.scope} data-scope={r.scope}>
              <td>{r.scope}</td>
              <td class="num">{r.inUse}</td>
              <td class="num">
                <LimitEditor row={r} onChanged={reload} />
                {r.configured !== undefined && <span class="muted"> (configured {r.configured})</span>}
              </td>
              <td><meter min={0} max={1} value={r.usage} high={0.8} /></td>
              <td class="oldest">{r.oldestWaiter}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {bp && <p class="muted">oldest waiter: the longest wait among every processor's runs and calls needing the scope, as each processor published it at most {bp.processorState.everySec} s ago</p>}
      <h2>Consumer lag</h2>
      {bp?.lag.why && <p class="muted">{bp.lag.why}</p>}
      {bp?.lag.report && (
        <>
          <p class="muted">
            as the lag monitor ({bp.lag.report.instance}) saw it at {new Date(bp.lag.report.at).toLocaleTimeString()}; groups:{' '}
            {bp.lag.report.groups.map((g) => `${g.group} (${g.members} members, ${g.status})`).join(', ')}
          </p>
          <table data-testid="lag">
            <thead>
              <tr><th>group</th><th>topic</th><th>partition</th><th>lag (messages)</th><th>lag (time)</th><th>status</th></tr>
            </thead>
            <tbody>
              {lagRows(bp.lag.report).map((r) => (
                <tr key={`${r.group}/${r.topic}/${r.partition}`} class={r.tone} data-group={r.group} data-topic={r.topic} data-partition={r.partition}>
                  <td>{r.group}</td><td>{r.topic}</td><td class="num">{r.partition}</td><td class="num">{r.lagMessages}</td><td class="num">{r.lagSeconds}</td><td>{r.status}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
      <h2>Paused partitions (every processor)</h2>
      <ul data-testid="paused">
        {bp?.paused.map((p) => (
          <li key={p.reason} data-reason={p.reason}>
            {pausedCount(p)}: {pausedWhy(p.reason)}
            <div class="muted partitions">{pausedPartitionList(p)}</div>
          </li>
        ))}
        {known && bp.paused.length === 0 && <li class="muted">none</li>}
      </ul>
      <h2>Held runs per dependency (every processor)</h2>
      <ul data-testid="held">
        {bp?.held.map((h) => (
          <li key={h.dependency} data-dependency={h.dependency}>
            {h.runs} runs held for {h.dependency} ({heldTenants(h.tenants)})
          </li>
        ))}
        {known && bp.held.length === 0 && <li class="muted">none</li>}
      </ul>
      {bp && <p class="muted">paused partitions and held runs: as each processor published them at most {bp.processorState.everySec} s ago</p>}
      <h2>Runs waiting for a dependency (cluster-wide)</h2>
      {bp?.waitingForDependency.why && <p class="muted">{bp.waitingForDependency.why}</p>}
      <ul data-testid="waiting-dependency">
        {bp?.waitingForDependency.counts?.map((w) => (
          <li key={`${w.tenant}/${w.runClass}`}>
            {w.runs} {w.runClass} runs of {w.tenant} (held in a processor or waiting in the retry topic)
          </li>
        ))}
        {bp?.waitingForDependency.counts?.length === 0 && <li class="muted">none</li>}
      </ul>
    </section>
  );
}
