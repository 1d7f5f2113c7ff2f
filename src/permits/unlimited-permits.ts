import type { RunRequested } from '../events/schemas.js';
import type { HeldPermits, RunPermitAnswer, RunPermitSource } from './run-permit-source.js';

const nothingHeld: HeldPermits = { release: () => Promise.resolve() };
const releaseNothing = (): Promise<void> => Promise.resolve();

/**
 * Grants every run and dependency permit at once, without Redis: concurrency caps are not
 * enforced (`processor.enforceCaps: false`). The only bound left is `processor.maxInFlight` per
 * instance. For measuring what the caps cost, and as a kill switch; never the default.
 */
export class UnlimitedPermits implements RunPermitSource {
  tryAcquire(_run: RunRequested): Promise<RunPermitAnswer> {
    return Promise.resolve({ granted: true, permits: nothingHeld });
  }

  /** Nothing is ever refused, so nothing ever waits for a release: no wake-up will come. */
  onWake(_listener: () => void): () => void {
    return () => undefined;
  }

  /** The dependency-permit shape RunExecutor takes: a call never waits, and its release is a no-op. */
  acquire(_dependency: string, _run: RunRequested): Promise<() => Promise<void>> {
    return Promise.resolve(releaseNothing);
  }
}
