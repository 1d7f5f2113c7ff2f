import type { BreakerView } from '../../breakers/breaker-gate.js';
import { get } from '../api.js';
import { usePolled } from '../hooks.js';

/** Breaker states as this API instance's breaker board sees them. Read-only: the breaker store has no forced states. */
export function DependenciesPage({ onLoggedOut }: { onLoggedOut: () => void }) {
  const { data, error } = usePolled(() => get<{ breakers: BreakerView[] }>('dependencies'), 5_000, onLoggedOut);
  return (
    <section>
      <h1>Dependencies</h1>
      {error && <p class="error">{error}</p>}
      <table data-testid="breakers">
        <thead>
          <tr><th>dependency</th><th>breaker</th><th>since / next probe</th></tr>
        </thead>
        <tbody>
          {data?.breakers.map((b) => (
            <tr key={b.name} class={b.state === 'closed' ? 'ok' : b.state === 'open' ? 'bad' : 'warn'}>
              <td>{b.name}</td>
              <td>{b.state.replace('_', '-')}</td>
              <td>{b.retryAt ? `next probe ${new Date(b.retryAt).toLocaleTimeString()}` : b.closedAt ? `closed at ${new Date(b.closedAt).toLocaleTimeString()}` : ''}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
