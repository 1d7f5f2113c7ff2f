import { ownEntry } from '../config/lookup.js';
import { rampUpShare } from '../config/ramp-up.js';
import type { SluiceConfig } from '../config/schema.js';
import type { BreakerView } from './breaker-gate.js';

/**
 * The share of its concurrency cap each dependency may use now, by its `breaker.rampUp` and the
 * close time this instance last saw in the breaker's Redis hash (see `BreakerBoard`).
 */
export function rampUpShares(config: Pick<SluiceConfig, 'dependencies'>, board: { view(dependency: string): BreakerView }, now: () => number = Date.now): (dependency: string) => number {
  return (dependency) => {
    const view = board.view(dependency);
    const since = view.state === 'closed' && view.closedAt !== undefined ? now() - view.closedAt : undefined;
    return rampUpShare(ownEntry(config.dependencies, dependency)?.breaker.rampUp, since);
  };
}
