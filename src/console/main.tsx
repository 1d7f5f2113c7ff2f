import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import type { ActiveAlert, PendingAlert } from '../api/console/alerts.js';
import type { FinishedSeries, OverviewPoint } from '../api/console/overview.js';
import { get, login, logout, resume } from './api.js';
import { usePolled } from './hooks.js';
import { BackpressurePage } from './pages/backpressure.js';
import { DependenciesPage } from './pages/dependencies.js';
import { DlqPage } from './pages/dlq.js';
import { Overview, OVERVIEW_REFRESH_MS } from './pages/overview.js';
import { RunsPage } from './pages/runs.js';
import { alertBanner } from './view-models.js';
import './style.css';

const PAGES = ['overview', 'backpressure', 'dependencies', 'runs', 'dlq'] as const;
type Page = (typeof PAGES)[number];

/** The page and run named by the URL's fragment (#/runs/<id>): links and reloads land where they were. */
function route(): { page: Page; runId?: string } {
  const [, page, runId] = location.hash.split('/');
  return { page: (PAGES as readonly string[]).includes(page ?? '') ? (page as Page) : 'overview', ...(runId ? { runId } : {}) };
}

function Login({ onIn }: { onIn: () => void }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState<string>();
  const submit = async (e: Event) => {
    e.preventDefault();
    try {
      await login(key);
      setKey('');
      onIn();
    } catch (err) {
      setError((err as Error).message);
    }
  };
  return (
    <form class="login" onSubmit={submit}>
      <h1>Sluice console</h1>
      <label>
        admin key
        <input name="key" type="password" autocomplete="off" value={key} onInput={(e) => setKey((e.target as HTMLInputElement).value)} />
      </label>
      <button type="submit">log in</button>
      {error && <p class="error" data-testid="login-error">{error}</p>}
    </form>
  );
}

/** The finished-run charts before the first answer. */
const NOTHING_FINISHED: FinishedSeries = { points: [], asOf: null, unavailable: null };

function Console({ onOut }: { onOut: () => void }) {
  const [where, setWhere] = useState(route());
  useEffect(() => {
    const onHash = () => setWhere(route());
    addEventListener('hashchange', onHash);
    return () => removeEventListener('hashchange', onHash);
  }, []);
  const overview = usePolled(() => get<{ points: OverviewPoint[]; finished: FinishedSeries; alerts: ActiveAlert[]; pending: PendingAlert[] }>('overview'), OVERVIEW_REFRESH_MS, onOut);
  const banner = alertBanner(overview.data?.alerts ?? []);
  return (
    <>
      <header>
        <strong>Sluice</strong>
        <nav>
          {PAGES.map((p) => (
            <a key={p} href={`#/${p}`} class={where.page === p ? 'current' : ''}>
              {p === 'dlq' ? 'DLQ' : p}
            </a>
          ))}
        </nav>
        <button class="link" onClick={() => void logout().finally(onOut)}>log out</button>
      </header>
      {banner && (
        <div class={`banner ${banner.level}`} role="alert" data-testid="alert-banner">
          {banner.lines.map((l) => <div key={l}>{l}</div>)}
        </div>
      )}
      <main>
        {where.page === 'overview' && <Overview points={overview.data?.points ?? []} finished={overview.data?.finished ?? NOTHING_FINISHED} pending={overview.data?.pending ?? []} />}
        {where.page === 'backpressure' && <BackpressurePage onLoggedOut={onOut} />}
        {where.page === 'dependencies' && <DependenciesPage onLoggedOut={onOut} />}
        {where.page === 'runs' && <RunsPage onLoggedOut={onOut} selected={where.runId} onSelect={(runId) => setWhere({ page: 'runs', ...(runId ? { runId } : {}) })} />}
        {where.page === 'dlq' && <DlqPage onLoggedOut={onOut} />}
      </main>
    </>
  );
}

function App() {
  const [state, setState] = useState<'checking' | 'out' | 'in'>('checking');
  useEffect(() => void resume().then((open) => setState(open ? 'in' : 'out'), () => setState('out')), []);
  if (state === 'checking') return <p class="muted">…</p>;
  return state === 'in' ? <Console onOut={() => setState('out')} /> : <Login onIn={() => setState('in')} />;
}

render(<App />, document.getElementById('app')!);
