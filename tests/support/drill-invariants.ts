import { expect } from 'vitest';
import type { SluiceConfig } from '../../src/config/schema.js';
import { ADMIN_KEY, http, type SluiceProcess } from '../integration/harness.js';
import type { DrillLog, Exchange, LoadStream } from './drill-load.js';

/** The contract's terminal statuses: a run that reads one of these is done for good. */
export const TERMINAL = ['completed', 'failed', 'expired', 'cancelled', 'dead_lettered'];

const POLL_INTERVAL_MS = 500;
const POLL_CONCURRENCY = 8;

export interface DrillVerdict {
  summary: string;
  /** Runs that got a 202 and did not read a terminal status within the bound, with what they read last. */
  notTerminal: { runId: string; tenant: string; last: string }[];
  /** Runs by final status. */
  byStatus: Record<string, number>;
  /** The last `GET /v1/runs/:id` body of each run that answered 200. */
  views: Map<string, any>;
  /** 5xx answers outside the contract: anything but 503 problem+json with Retry-After. */
  bad5xx: Exchange[];
  allowed5xx: number;
  /** Requests that got no answer at all (refused, reset, or nothing within 15 s). */
  noAnswer: Exchange[];
  /** Tool calls the simulator answered from its idempotency ledger: redeliveries, absorbed. */
  duplicateDeliveries: number;
  /** Side effects beyond one per (run, tool step): a redelivery that got through as a new effect. */
  extraEffects: number;
  /** Tool outputs in completed results that no side effect at the simulator accounts for. */
  missingEffects: number;
  /** Sluice processes that should still run but exited, with the end of their stderr. */
  exited: { code: number | null; signal: string | null; stderr: string }[];
}

/**
 * The one 5xx the contract allows: `503` problem+json with `Retry-After` (overloaded,
 * dependency_unavailable, deadline_unreachable, not_ready). A bare 500 — or a 500 problem+json
 * `internal`, or any 5xx of another type — is a defect.
 */
export function isAllowed5xx(e: Pick<Exchange, 'status' | 'contentType' | 'retryAfter'>): boolean {
  return e.status === 503 && (e.contentType ?? '').includes('application/problem+json') && e.retryAfter !== null;
}

interface SimStats {
  sideEffects?: Record<string, number>;
  duplicateDeliveries?: Record<string, number>;
}

export async function resetSimStats(sim: string): Promise<void> {
  const r = await http(`${sim}/admin/stats/reset`, { method: 'POST', key: ADMIN_KEY });
  if (r.status !== 204) throw new Error(`could not reset the simulator's stats: ${r.status}`);
}

const sum = (values: Record<string, number> | undefined) => Object.values(values ?? {}).reduce((a, b) => a + b, 0);

/**
 * Follows every run that got a 202 by `GET /v1/runs/:id` until it reads a terminal status or
 * `terminalWithinMs` passes (a 404, 429 or 503 while an outage lasts is waited out, not judged),
 * then weighs the drill: terminal runs, 5xx, side effects, and prints the drill's one-line summary.
 *
 * "Once" for side effects: the processor sends `Idempotency-Key: <runId>:<stepId>` with each tool
 * call and the simulator remembers each key's first answer, so a redelivered call is a
 * `duplicateDelivery` (absorbed), not a second effect. The effects counted must therefore lie
 * between the tool outputs in completed results and one per (admitted run, tool step).
 */
export async function settleAndWeigh(opts: {
  name: string;
  log: DrillLog;
  sim: string;
  config: SluiceConfig;
  terminalWithinMs: number;
  /** The Sluice processes that must still run at the end (not those the drill killed). */
  processes: SluiceProcess[];
  /** Requests sent, when they were not made through the log (the fuzz). */
  submitted?: number;
}): Promise<DrillVerdict> {
  const { log, config } = opts;
  const runs = [...log.accepted.values()];
  const last = new Map<string, { status: string; body: any }>();
  const until = Date.now() + opts.terminalWithinMs;
  let pending = runs;
  const apiGone = () => opts.processes.length > 0 && opts.processes.every((p) => p.child.exitCode !== null || p.child.signalCode !== null);
  while (pending.length > 0 && Date.now() < until && !apiGone()) {
    let backOffMs = POLL_INTERVAL_MS;
    for (let i = 0; i < pending.length; i += POLL_CONCURRENCY) {
      await Promise.all(
        pending.slice(i, i + POLL_CONCURRENCY).map(async (run) => {
          const e = await log.call(run.tenant, run.key, 'GET', `/v1/runs/${run.runId}`);
          const body = e.body as { status?: string } | undefined;
          if (e.status === 200 && typeof body?.status === 'string') last.set(run.runId, { status: body.status, body });
          else if (!last.has(run.runId) || last.get(run.runId)!.status.startsWith('HTTP')) last.set(run.runId, { status: `HTTP ${e.status}`, body });
          if (e.status === 429 || e.status === 503) backOffMs = Math.max(backOffMs, 1000 * Math.min(5, Number(e.retryAfter) || 1));
        }),
      );
    }
    pending = pending.filter((r) => !TERMINAL.includes(last.get(r.runId)?.status ?? ''));
    if (pending.length > 0) await new Promise((r) => setTimeout(r, backOffMs));
  }

  const byStatus: Record<string, number> = {};
  for (const run of runs) {
    const status = last.get(run.runId)?.status ?? 'never read';
    byStatus[status] = (byStatus[status] ?? 0) + 1;
  }
  const notTerminal = pending.map((r) => ({ runId: r.runId, tenant: r.tenant, last: last.get(r.runId)?.status ?? 'never read' }));

  const stats = await http(`${opts.sim}/admin/stats`, { key: ADMIN_KEY }).then(
    (r) => r.body as SimStats,
    () => undefined,
  );
  const toolOf = (workflow: string, stepId: string) => config.workflows[workflow]?.steps.find((s) => s.id === stepId && s.kind === 'tool');
  const possible = new Map<string, number>();
  const shown = new Map<string, number>();
  for (const run of runs) {
    for (const step of config.workflows[run.workflow]?.steps ?? []) if (step.kind === 'tool') possible.set(step.tool, (possible.get(step.tool) ?? 0) + 1);
    const view = last.get(run.runId);
    if (view?.status !== 'completed') continue;
    for (const s of (view.body.result?.steps ?? []) as { id: string; output?: { unavailable?: boolean } }[]) {
      const step = toolOf(run.workflow, s.id);
      if (step?.kind === 'tool' && s.output !== undefined && s.output?.unavailable !== true) shown.set(step.tool, (shown.get(step.tool) ?? 0) + 1);
    }
  }
  const effects = stats?.sideEffects ?? {};
  const tools = new Set([...Object.keys(effects), ...possible.keys()]);
  // Without the simulator's figures nothing can be said about side effects: that fails too.
  let extraEffects = stats ? 0 : NaN;
  let missingEffects = stats ? 0 : NaN;
  for (const tool of tools) {
    extraEffects += Math.max(0, (effects[tool] ?? 0) - (possible.get(tool) ?? 0));
    missingEffects += Math.max(0, (shown.get(tool) ?? 0) - (effects[tool] ?? 0));
  }
  const duplicateDeliveries = sum(stats?.duplicateDeliveries);

  const fiveXx = log.exchanges.filter((e) => e.status >= 500);
  const bad5xx = fiveXx.filter((e) => !isAllowed5xx(e));
  const noAnswer = log.exchanges.filter((e) => e.status === 0);
  const submitted = opts.submitted ?? log.exchanges.filter((e) => e.method === 'POST' && e.path === '/v1/runs').length;
  const terminal = runs.length - notTerminal.length;
  const exited = opts.processes
    .filter((p) => p.child.exitCode !== null || p.child.signalCode !== null)
    .map((p) => ({ code: p.child.exitCode, signal: p.child.signalCode, stderr: p.stderr().slice(-1_500) }));
  const statuses = Object.entries(byStatus).map(([s, n]) => `${s}=${n}`).join(' ');
  const summary =
    `DRILL ${opts.name}: submitted=${submitted} accepted=${runs.length} terminal=${terminal}/${runs.length} (${statuses}) ` +
    `duplicates=${duplicateDeliveries} extraEffects=${extraEffects} missingEffects=${missingEffects} ` +
    `5xx=${fiveXx.length} (503 problem+json=${fiveXx.length - bad5xx.length}, other=${bad5xx.length}) noAnswer=${noAnswer.length} requests=${log.exchanges.length} exited=${exited.length}`;
  console.log(summary);
  return { summary, notTerminal, byStatus, bad5xx, allowed5xx: fiveXx.length - bad5xx.length, noAnswer, duplicateDeliveries, extraEffects, missingEffects, exited, views: new Map([...last].filter(([, v]) => !v.status.startsWith('HTTP')).map(([id, v]) => [id, v.body])) };
}

const brief = (e: Exchange) => `${e.method} ${e.path} → ${e.status} ${e.contentType ?? ''} ${e.error ?? JSON.stringify(e.body)?.slice(0, 160)}`;

/** How many exchanges broke a rule, and a few of them: enough to see why without a wall of text. */
export function sampleOf(exchanges: Exchange[], n = 3): { count: number; first: string[] } {
  return { count: exchanges.length, first: exchanges.slice(0, n).map(brief) };
}

/** The drills' common invariants, each a soft assertion so one failed run shows every broken one. */
export function expectDrillInvariants(v: DrillVerdict): void {
  expect.soft({ count: v.notTerminal.length, first: v.notTerminal.slice(0, 5) }, 'every run that got a 202 reaches a terminal status').toEqual({ count: 0, first: [] });
  expect.soft(sampleOf(v.bad5xx), 'no 5xx but 503 problem+json with Retry-After').toEqual({ count: 0, first: [] });
  expect.soft(sampleOf(v.noAnswer), 'every request is answered').toEqual({ count: 0, first: [] });
  expect.soft(v.extraEffects, 'each tool step takes effect at most once').toBe(0);
  expect.soft(v.missingEffects, 'each tool output in a completed result took effect').toBe(0);
  expect.soft(v.exited, 'Sluice is still running').toEqual([]);
}

/**
 * Submissions the API refused with 503 because Kafka did not acknowledge them, those whose event
 * was in Kafka after all and was stopped (`cancelled`), and those that ran anyway: a 503 says "not
 * accepted", so that list must be empty.
 */
export async function refusedSubmissions(
  front: SluiceProcess,
  log: DrillLog,
  streams: LoadStream[],
): Promise<{ refused: number; landedCancelled: number; ranAnyway: { runId: string; status: unknown }[] }> {
  const refused = front.logs.filter((l) => l.msg === 'Kafka did not acknowledge a submission' && typeof l.runId === 'string');
  const ranAnyway: { runId: string; status: unknown }[] = [];
  let landedCancelled = 0;
  for (const l of refused) {
    const stream = streams.find((t) => t.tenant === l.tenantId)!;
    const r = await log.call(stream.tenant, stream.key, 'GET', `/v1/runs/${String(l.runId)}`);
    if (r.status !== 200) continue;
    const status = (r.body as { status?: string }).status;
    if (status === 'cancelled') landedCancelled++;
    else ranAnyway.push({ runId: String(l.runId), status });
  }
  return { refused: refused.length, landedCancelled, ranAnyway };
}
