/**
 * What the in-flight and footprint benches share: the Sluice config they run with (caps set by
 * the bench, not local.yaml's demo values) and the provider simulator's admin API.
 */
import { benchConfigBase } from './bench-harness.js';
import { simAdmin } from './sim-admin.js';

export const BENCH_WORKFLOW = 'support-reply';
/** support-reply's LLM calls (understand, reply); its order lookup is the simulator's tool at 0 ms. */
export const LLM_CALLS_PER_RUN = 2;

export interface StackConfig {
  opsPort: number;
  registryDir: string;
  simulatorUrl: string;
  /**
   * processor.maxInFlight of this process. Its partitionBuffer is twice that: a partition paused
   * for a full buffer resumes at half, so even one partition then still holds a full maxInFlight.
   */
  maxInFlight: number;
  /** The anthropic dependency's concurrency cap across every processor. */
  llmCap: number;
  /** Every other cap: tenants, workflows, tools, limits.global. */
  otherCaps: number;
}

/** local.yaml with the bench's caps and ports, logging at warn. */
export function stackConfigDoc(o: StackConfig): Record<string, any> {
  const c = benchConfigBase(o);
  c.limits = { global: o.otherCaps };
  c.admission = { maxBacklog: 100_000_000 };
  c.processor = { maxInFlight: o.maxInFlight, partitionBuffer: Math.min(100_000, o.maxInFlight * 2), shutdownGraceMs: 2_000 };
  for (const t of Object.values<any>(c.tenants)) {
    t.maxConcurrency = o.otherCaps;
    t.admission = { bucket: { capacity: 1_000_000, refillPerSec: 1_000_000 }, maxBacklog: 10_000_000 };
  }
  for (const [name, d] of Object.entries<any>(c.dependencies)) d.maxConcurrency = name === 'anthropic' ? o.llmCap : o.otherCaps;
  for (const w of Object.values<any>(c.workflows)) w.maxConcurrency = o.otherCaps;
  return c;
}


/** Every LLM call takes exactly `llmMs`, every tool call 0 ms, no errors; verified by reading the profiles back. */
export async function setLatencies(simulatorUrl: string, llmMs: number): Promise<void> {
  const want = (target: string) => (target === 'anthropic' ? llmMs : 0);
  const profiles = (await simAdmin(simulatorUrl, 'GET', '/faults')) as Record<string, unknown>;
  for (const target of Object.keys(profiles)) {
    await simAdmin(simulatorUrl, 'PUT', '/faults', { target, latencyMs: want(target), jitterMs: 0, errorRate: 0, hang: false });
  }
  const after = (await simAdmin(simulatorUrl, 'GET', '/faults')) as Record<string, { latencyMs: number; jitterMs: number }>;
  const off = Object.entries(after).filter(([t, p]) => p.latencyMs !== want(t) || p.jitterMs !== 0);
  if (off.length > 0) throw new Error(`simulator targets not at the bench's latency: ${off.map(([t]) => t).join(', ')}`);
}
