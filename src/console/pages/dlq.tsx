import { useState } from 'preact/hooks';
import type { DeadLetterSummary } from '../../dlq/dead-letter-store.js';
import { get, post } from '../api.js';
import { usePolled } from '../hooks.js';
import { filterQuery } from '../view-models.js';

type Row = Omit<DeadLetterSummary, 'failedAt'> & { failedAt: string };
interface ReplayAnswer {
  lines: string[];
  summary: string;
}

function RowDetail({ id, onLoggedOut }: { id: string; onLoggedOut: () => void }) {
  const { data, error } = usePolled(() => get<Record<string, unknown>>(`dlq/${id}`), 0, onLoggedOut, [id]);
  if (error) return <p class="error">{error}</p>;
  if (!data) return <p class="muted">loading…</p>;
  return (
    <article class="run" data-testid="dlq-row">
      <h2>Dead letter #{id}</h2>
      <p>{String(data.errorClass)}: {String(data.errorMessage)}</p>
      <h3>Run</h3>
      <pre>{JSON.stringify(data.payloadJson, null, 2) ?? '(not a run Sluice wrote: poison, or a record the ingress refused; see its bytes with sluice dlq show)'}</pre>
      <h3>Headers</h3>
      <pre>{JSON.stringify(data.headers, null, 2)}</pre>
      {data.errorStack ? (<><h3>Stack</h3><pre>{String(data.errorStack)}</pre></>) : null}
    </article>
  );
}

export function DlqPage({ onLoggedOut }: { onLoggedOut: () => void }) {
  const [filter, setFilter] = useState<Record<string, string>>({ status: 'pending', tenant: '', reason: '' });
  const [query, setQuery] = useState(filterQuery({ status: 'pending' }));
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [shown, setShown] = useState<string>();
  const [answer, setAnswer] = useState<ReplayAnswer & { dryRun: boolean }>();
  const [reason, setReason] = useState('');
  const [error, setError] = useState<string>();
  const list = usePolled(() => get<{ rows: Row[] }>(`dlq?${query}`), 10_000, onLoggedOut, [query]);
  const ids = [...selected];
  const toggle = (id: string) => {
    const next = new Set(selected);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    setSelected(next);
    setAnswer(undefined);
  };
  const replay = async (dryRun: boolean) => {
    try {
      setAnswer({ ...(await post<ReplayAnswer>('dlq/replay', { ids, dryRun })), dryRun });
      setError(undefined);
      if (!dryRun) (setSelected(new Set()), list.reload());
    } catch (err) {
      setError((err as Error).message);
    }
  };
  const discard = async () => {
    try {
      const r = await post<{ discarded: string[] }>('dlq/discard', { ids, reason });
      setAnswer({ lines: [], summary: `discarded ${r.discarded.map((id) => `#${id}`).join(', ') || 'nothing'}`, dryRun: false });
      setSelected(new Set());
      list.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  };
  const field = (name: string, label: string) => (
    <label>
      {label}
      <input name={name} value={filter[name]} onInput={(e) => setFilter({ ...filter, [name]: (e.target as HTMLInputElement).value })} />
    </label>
  );
  return (
    <section>
      <h1>DLQ</h1>
      <form class="filters" onSubmit={(e) => (e.preventDefault(), setQuery(filterQuery(filter)))}>
        <label>
          status
          <select name="status" value={filter.status} onChange={(e) => setFilter({ ...filter, status: (e.target as HTMLSelectElement).value })}>
            {['pending', 'replayed', 'discarded', ''].map((s) => <option key={s} value={s}>{s || 'any'}</option>)}
          </select>
        </label>
        {field('tenant', 'tenant')}
        {field('reason', 'reason')}
        <button type="submit">find</button>
      </form>
      {(list.error ?? error) && <p class="error">{list.error ?? error}</p>}
      <p>
        {ids.length} selected:{' '}
        <button disabled={ids.length === 0} data-testid="dlq-dry-run" onClick={() => void replay(true)}>preview replay (dry run)</button>{' '}
        <button class="danger" disabled={ids.length === 0 || answer?.dryRun !== true} data-testid="dlq-replay" onClick={() => void replay(false)} title="preview first">replay</button>{' '}
        <input aria-label="discard reason" placeholder="why discard" value={reason} onInput={(e) => setReason((e.target as HTMLInputElement).value)} />{' '}
        <button class="danger" disabled={ids.length === 0 || reason.trim() === ''} onClick={() => void discard()}>discard</button>
      </p>
      {answer && (
        <div class="notice" data-testid="dlq-answer">
          {answer.lines.map((l) => <div key={l}>{l}</div>)}
          <strong>{answer.summary}</strong>
        </div>
      )}
      <table data-testid="dlq">
        <thead>
          <tr><th></th><th>id</th><th>failed at</th><th>tenant</th><th>workflow</th><th>reason</th><th>error</th><th>attempts</th><th>status</th></tr>
        </thead>
        <tbody>
          {list.data?.rows.map((r) => (
            <tr key={r.id} class={r.id === shown ? 'selected' : ''}>
              <td><input type="checkbox" aria-label={`select #${r.id}`} data-testid={`dlq-select-${r.id}`} checked={selected.has(r.id)} disabled={r.status !== 'pending'} onChange={() => toggle(r.id)} /></td>
              <td><button class="link" onClick={() => setShown(r.id)}>#{r.id}</button></td>
              <td>{new Date(r.failedAt).toLocaleString()}</td><td>{r.tenantId ?? '-'}</td><td>{r.workflow ?? '-'}</td><td>{r.reason}</td>
              <td>{r.errorClass}: {r.errorMessage.slice(0, 80)}</td><td class="num">{r.attempts}</td><td>{r.status}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {list.data && list.data.rows.length === 0 && <p class="muted">no dead letters match</p>}
      {shown && <RowDetail id={shown} onLoggedOut={onLoggedOut} />}
    </section>
  );
}
