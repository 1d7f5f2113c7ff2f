/**
 * Runs `task` now and every `everyMs`, without keeping the process alive for it. A run that fails
 * is a run skipped: left unhandled, its rejection would end the process. Returns what stops it.
 */
export function repeatEvery(everyMs: number, task: () => Promise<unknown>): () => void {
  const tick = () => void task().catch(() => undefined);
  tick();
  const timer = setInterval(tick, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}
