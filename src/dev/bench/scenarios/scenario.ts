/**
 * Load scenarios as data (k6/scenarios/*.json): who sends what at which open-loop rate, how the
 * clients retry, which provider faults happen when, and the targets a run must meet. Faults use
 * the provider simulator's own fields and validation (fault-profile.ts). See docs/scenarios.md.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { packageRoot } from '../../../util/package-root.js';
import { parseFaultUpdate, type FaultPatch } from '../../sim/fault-profile.js';

/** A scenario lasts at most an hour: a typo (an extra zero) must not wedge a run for days. */
export const MAX_DURATION_SEC = 3_600;
const MAX_RATE_PER_SEC = 100_000;

const seconds = z.number().min(0).max(MAX_DURATION_SEC);
const rate = z.number().min(0).max(MAX_RATE_PER_SEC);

const pattern = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('constant'), rate }),
  /** From `from` to `to` per second, linearly over the first `overSec`; then `to`. */
  z.strictObject({ kind: z.literal('ramp'), from: rate, to: rate, overSec: seconds.positive() }),
  /** `base` per second, except `peak` per second from `atSec` for `forSec`. */
  z.strictObject({ kind: z.literal('spike'), base: rate, peak: rate, atSec: seconds, forSec: seconds.positive() }),
]);

const stream = z.strictObject({
  tenant: z.string().min(1),
  workflow: z.string().min(1),
  class: z.enum(['interactive', 'batch']),
  pattern,
  /** The tenant pressing on the others: a run without the noisy streams is the quiet tenants' baseline (quietTenantsP99Ratio). */
  noisy: z.boolean().optional(),
});

const clientRetry = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('none') }),
  /** After each refusal or transport error, wait the next delay and send again; then give up. */
  z.strictObject({ kind: z.literal('fixed'), delaysSec: z.array(z.number().positive().max(600)).min(1).max(20) }),
]);

/**
 * The fault's fields are checked, and normalised (an error status alone means every call), by the
 * simulator's own parser, so a scenario accepts exactly what `PUT /admin/faults` accepts.
 */
const faultWindow = z
  .strictObject({
    atSec: seconds,
    forSec: seconds.positive(),
    target: z.string().min(1),
    fault: z.record(z.string(), z.unknown()),
  })
  .transform((f, ctx): FaultWindow => {
    if ('target' in f.fault) ctx.addIssue({ code: 'custom', path: ['fault', 'target'], message: 'belongs beside fault, not inside it' });
    const parsed = parseFaultUpdate({ ...f.fault, target: f.target }, [f.target]);
    if (!parsed.ok) {
      for (const e of parsed.errors) ctx.addIssue({ code: 'custom', path: ['fault', ...e.field.split('.')], message: e.message });
      return z.NEVER;
    }
    return { atSec: f.atSec, forSec: f.forSec, target: f.target, fault: parsed.value.patch };
  });

const share = z.number().min(0).max(1);

/**
 * Pass/fail bounds of a run; each is optional, only what the scenario is about is set. Each is an
 * upper bound on Sluice's figure except those in AT_LEAST_TARGETS, which are lower bounds.
 */
const targets = z.strictObject({
  /** p99 latency of interactive sends, from each send to its answer: the refusal, or the run's terminal status. */
  interactiveP99Ms: z.number().positive().optional(),
  /** p99 of every request's answer (accepted or refused), from send to response. */
  answerP99Ms: z.number().positive().optional(),
  /** Provider calls per request offered by the clients (retries of clients included in both). */
  providerCallsPerOffered: z.number().positive().optional(),
  /** Seconds after the last arrival until every accepted run has ended. */
  drainSec: z.number().min(0).optional(),
  /** Peak processing rate after a fault ends, over the rate before it. */
  peakAfterRatio: z.number().positive().optional(),
  /** Quiet tenants' p99 over their p99 in the same scenario without the noisy tenant. */
  quietTenantsP99Ratio: z.number().positive().optional(),
  /** Accepted runs that never end. */
  lost: z.number().int().min(0).optional(),
  /** Tool steps that take effect more than once. */
  duplicates: z.number().int().min(0).optional(),
  /** At least: on-time goodput over the goodput bound, 0..1. */
  onTimeGoodputOfBound: share.optional(),
  /** Provider calls that went into no completed real answer, over all provider calls. */
  wastedShare: share.optional(),
  /** The provider's rate-limit 429s over all provider calls. */
  provider429Share: share.optional(),
  /** At least, per tenant named: the share of its requests completed on time, 0..1. */
  tenantOnTimeShare: z.record(z.string().min(1), share).optional(),
  /** How far the provider calls of the two weighted tenants are from their weights' ratio (|observed ÷ weights − 1|). */
  weightedShareError: z.number().min(0).optional(),
});

/** The targets that are lower bounds (the figure must reach them); every other target is an upper bound. */
export const AT_LEAST_TARGETS: ReadonlySet<keyof ScenarioTargets> = new Set(['onTimeGoodputOfBound', 'tenantOnTimeShare']);

const scenarioSchema = z
  .strictObject({
    name: z.string().regex(/^[a-z0-9-]+$/, 'must be lower-case letters, digits and dashes'),
    description: z.string().min(1),
    durationSec: seconds.positive(),
    /**
     * The deadline each class's clients send with a run (`deadlineMs`): how long they wait for an
     * answer. Not scaled: it bounds processing, which a time scale does not shorten.
     */
    deadlineSec: z.strictObject({ interactive: z.number().min(1).max(86_400), batch: z.number().min(1).max(86_400) }),
    arrivals: z.array(stream).min(1),
    clientRetry,
    faults: z.array(faultWindow),
    /**
     * Sluice's `tenants.<t>.weight` for this run (the naive system has no weights); a tenant left
     * out keeps its configured weight.
     */
    tenantWeights: z.record(z.string().min(1), z.number().positive().max(1_000)).optional(),
    targets,
  })
  .superRefine((s, ctx) => {
    const ends = (path: (string | number)[], endSec: number): void => {
      if (endSec > s.durationSec) ctx.addIssue({ code: 'custom', path, message: `ends at ${endSec} s, after durationSec (${s.durationSec})` });
    };
    s.arrivals.forEach(({ pattern: p }, i) => {
      if (p.kind === 'spike') ends(['arrivals', i, 'pattern', 'forSec'], p.atSec + p.forSec);
      if (p.kind === 'ramp') ends(['arrivals', i, 'pattern', 'overSec'], p.overSec);
    });
    s.faults.forEach((f, i) => ends(['faults', i, 'forSec'], f.atSec + f.forSec));
    if (s.targets.quietTenantsP99Ratio !== undefined && !s.arrivals.some((a) => a.noisy === true)) {
      ctx.addIssue({ code: 'custom', path: ['targets', 'quietTenantsP99Ratio'], message: 'needs a stream marked "noisy": true' });
    }
    const senders = new Set(s.arrivals.map((a) => a.tenant));
    for (const tenant of Object.keys(s.targets.tenantOnTimeShare ?? {})) {
      if (!senders.has(tenant)) ctx.addIssue({ code: 'custom', path: ['targets', 'tenantOnTimeShare', tenant], message: 'is not a tenant of the arrivals' });
    }
    if (s.targets.weightedShareError !== undefined && Object.keys(s.tenantWeights ?? {}).filter((t) => senders.has(t)).length !== 2) {
      ctx.addIssue({ code: 'custom', path: ['targets', 'weightedShareError'], message: 'needs tenantWeights naming exactly two tenants of the arrivals' });
    }
  });

export type ArrivalPattern = z.infer<typeof pattern>;
export type ArrivalStream = z.infer<typeof stream>;
export type ClientRetry = z.infer<typeof clientRetry>;
export type ScenarioTargets = z.infer<typeof targets>;

/** A fault in force from `atSec` for `forSec`, as the patch `PUT /admin/faults` would apply to `target`. */
export interface FaultWindow {
  atSec: number;
  forSec: number;
  target: string;
  fault: FaultPatch;
}

export type Scenario = z.infer<typeof scenarioSchema>;

export class ScenarioError extends Error {}

export function scenariosDir(): string {
  return join(packageRoot(), 'k6', 'scenarios');
}

/** Validates one scenario; `file` names it in errors, each of which also names its field. */
export function parseScenario(input: unknown, file: string): Scenario {
  const result = scenarioSchema.safeParse(input);
  if (!result.success) {
    const lines = result.error.issues.map((issue) => `${file}: ${issue.path.length > 0 ? issue.path.join('.') : '(root)'}: ${issue.message}`);
    throw new ScenarioError(lines.join('\n'));
  }
  return result.data;
}

/** Reads `<dir>/<name>.json`; the scenario's own name must match its file's. */
export function loadScenario(name: string, dir: string = scenariosDir()): Scenario {
  const file = join(dir, `${name}.json`);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ScenarioError(`${file}: cannot read: ${(err as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new ScenarioError(`${file}: not valid JSON: ${(err as Error).message}`);
  }
  const scenario = parseScenario(json, file);
  if (scenario.name !== name) throw new ScenarioError(`${file}: name: is "${scenario.name}", must match the file name "${name}"`);
  return scenario;
}

/** Every scenario in `dir`, by name. */
export function loadScenarios(dir: string = scenariosDir()): Scenario[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => loadScenario(f.slice(0, -'.json'.length), dir));
}
