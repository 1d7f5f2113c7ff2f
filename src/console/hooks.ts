import { useEffect, useState } from 'preact/hooks';
import { LoggedOut } from './api.js';

export interface Polled<T> {
  data: T | undefined;
  error: string | undefined;
  /** Reads again now (after a change the page made). */
  reload: () => void;
}

/** Reads `load` now and every `everyMs` while the page is shown; a lost session sends the user to the login form. */
export function usePolled<T>(load: () => Promise<T>, everyMs: number, onLoggedOut: () => void, deps: unknown[] = []): Polled<T> {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<string>();
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    const read = () =>
      load().then(
        (d) => live && (setData(d), setError(undefined)),
        (err: unknown) => {
          if (!live) return;
          if (err instanceof LoggedOut) onLoggedOut();
          else setError((err as Error).message);
        },
      );
    void read();
    const timer = everyMs > 0 ? setInterval(read, everyMs) : undefined;
    return () => {
      live = false;
      clearInterval(timer);
    };
  }, [tick, ...deps]);
  return { data, error, reload: () => setTick((t) => t + 1) };
}
