/**
 * k6 `options` for a load scenario of k6/scenarios/*.json (format and time scale: docs/scenarios.md).
 * Plain JavaScript without k6 imports, so the project's unit tests run it under Node; the k6 side
 * (requests, faults, metrics) is scenario-run.js.
 *
 * Each arrival stream is an open-loop k6 scenario running `submit`; each change of a provider fault
 * is a one-iteration scenario running `setFault` at its instant. Thresholds cover what k6 measures:
 * the answers to POST /v1/runs. Whether runs complete, how long they take, the drain, lost runs,
 * duplicate effects and provider calls are not visible to k6: the project's own harness
 * (`npm run -s bench scenario`) measures those targets.
 */

/** The answers of the overload contract (docs/contract.md): accepted or queued, deferred, refused. */
export const CONTRACT_STATUSES = [202, 429, 503];
/** Tag of the POST /v1/runs requests, so thresholds ignore the simulator's admin calls. */
export const SUBMIT_TAGS = { call: 'submit' };
/** Tag of the checks on every answer to POST /v1/runs. */
export const CONTRACT_CHECK_TAGS = { kind: 'contract' };
/** A submission is answered at once by contract; one slower than this counts as a transport error. */
export const SUBMIT_TIMEOUT_SEC = 10;
/** What an answer usually takes, to size the VU pools: a slower Sluice shows as dropped iterations. */
const USUAL_ANSWER_SEC = 1;

/** The send-to-answer Trend of a class (first send to last answer, client retries included). */
export function answerTrendName(runClass) {
  return `${runClass}_answer_ms`;
}

/** The local tenants' keys (config/local.yaml); API_KEYS (JSON, tenant → key) replaces them. */
const LOCAL_API_KEYS = { 'tenant-a': 'local-key-a', 'tenant-b': 'local-key-b', 'tenant-c': 'local-key-c' };

export function apiKeys(env) {
  if (env.API_KEYS === undefined) return LOCAL_API_KEYS;
  const keys = JSON.parse(env.API_KEYS);
  if (typeof keys !== 'object' || keys === null || Array.isArray(keys) || !Object.values(keys).every((k) => typeof k === 'string')) {
    throw new Error('API_KEYS must be a JSON object of tenant → API key, e.g. {"tenant-a":"local-key-a"}');
  }
  return keys;
}

/** TIME_SCALE k (default 1, at least 1) divides every duration and instant of the scenario; rates stay. */
export function timeScale(env) {
  const k = Number(env.TIME_SCALE ?? 1);
  if (!(k >= 1)) throw new Error(`TIME_SCALE must be a number of at least 1, got ${env.TIME_SCALE}`);
  return k;
}

/** The client's waits before each resend, in seconds of the scaled run. */
export function clientDelaysSec(def, k) {
  return def.clientRetry.kind === 'fixed' ? def.clientRetry.delaysSec.map((d) => d / k) : [];
}

/**
 * The provider fault changes of the timeline, by instant: at each start or end of a window, the
 * patch in force for its target from then on (windows of one target overlapping apply in file
 * order, a later one's fields over an earlier one's), or null when none is: back to the baseline.
 */
function faultChanges(def, k) {
  const changes = [];
  for (const window of def.faults) {
    for (const atSec of [window.atSec, window.atSec + window.forSec]) {
      if (changes.some((c) => c.target === window.target && c.atSec === atSec)) continue;
      const inForce = def.faults.filter((w) => w.target === window.target && w.atSec <= atSec && atSec < w.atSec + w.forSec);
      changes.push({ target: window.target, atSec, patch: inForce.length === 0 ? null : Object.assign({}, ...inForce.map((w) => w.fault)) });
    }
  }
  return changes.sort((a, b) => a.atSec - b.atSec).map(({ target, atSec, patch }) => ({ target, atMs: scaledMs(atSec, k), patch }));
}

/**
 * k6 options for `def` under `env` (TIME_SCALE; SIM_URL turns the fault timeline on). Scenario
 * names keep to what k6 accepts: latin letters, digits, underscores and dashes.
 */
export function k6Options(def, env) {
  const k = timeScale(env);
  const scenarios = {};
  def.arrivals.forEach((stream, i) => {
    const arrivals = arrivalScenario(stream.pattern, def.durationSec, k, iterationSec(def, k));
    if (arrivals === undefined) return;
    scenarios[`stream-${i}-${k6Name(stream.tenant)}`] = {
      ...arrivals,
      exec: 'submit',
      env: { STREAM_TENANT: stream.tenant, STREAM_WORKFLOW: stream.workflow, STREAM_CLASS: stream.class },
      tags: { tenant: stream.tenant, workflow: stream.workflow, class: stream.class },
    };
  });
  if (env.SIM_URL !== undefined) {
    faultChanges(def, k).forEach((change, i) => {
      scenarios[`fault-${i}-${k6Name(change.target)}`] = {
        executor: 'shared-iterations',
        vus: 1,
        iterations: 1,
        startTime: `${change.atMs}ms`,
        exec: 'setFault',
        env: { FAULT_TARGET: change.target, ...(change.patch !== null && { FAULT_PATCH: JSON.stringify(change.patch) }) },
      };
    });
  }
  return {
    scenarios,
    thresholds: thresholds(def.targets),
    // Only the simulator's fault profiles are read (setup asks for its body back).
    discardResponseBodies: true,
    summaryTrendStats: ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)'],
  };
}

/**
 * Refusals are honest answers, so they pass: the contract check fails only for answers outside
 * the contract (another status, a refusal without Retry-After, no answer).
 */
function thresholds(targets) {
  const bounds = { [`checks{${tagFilter(CONTRACT_CHECK_TAGS)}}`]: ['rate>0.99'] };
  if ('answerP99Ms' in targets) bounds[`http_req_duration{${tagFilter(SUBMIT_TAGS)}}`] = [`p(99)<${targets.answerP99Ms}`];
  if ('interactiveP99Ms' in targets) bounds[answerTrendName('interactive')] = [`p(99)<${targets.interactiveP99Ms}`];
  return bounds;
}

function tagFilter(tags) {
  return Object.entries(tags)
    .map(([name, value]) => `${name}:${value}`)
    .join(',');
}

/** A scaled instant or duration in whole ms; stages are differences of instants, so they add up exactly. */
function scaledMs(sec, k) {
  return Math.round((sec * 1000) / k);
}

function k6Name(name) {
  return name.replace(/[^A-Za-z0-9_-]/g, '_');
}

/** The longest a VU is held by one offered request: every try answered, every client wait. */
function iterationSec(def, k) {
  const delays = clientDelaysSec(def, k);
  return { usual: (delays.length + 1) * USUAL_ANSWER_SEC + sum(delays), worst: (delays.length + 1) * SUBMIT_TIMEOUT_SEC + sum(delays) };
}

/** The executor of one stream, or undefined when it never sends (k6 refuses an arrival rate of 0). */
function arrivalScenario(pattern, durationSec, k, holdSec) {
  const pieces = ratePieces(pattern, durationSec);
  const peak = Math.max(...pieces.flatMap((p) => [p.fromRate, p.toRate]));
  if (peak === 0) return undefined;
  const unit = timeUnit(pieces.flatMap((p) => [p.fromRate, p.toRate]));
  const vus = {
    preAllocatedVUs: Math.max(1, Math.ceil(peak * USUAL_ANSWER_SEC)),
    maxVUs: Math.max(1, Math.ceil(peak * holdSec.usual)),
    // Iterations running at the end finish their client retries.
    gracefulStop: `${Math.ceil(holdSec.worst)}s`,
  };
  if (pattern.kind === 'constant') {
    return { executor: 'constant-arrival-rate', rate: unit.count(pattern.rate), timeUnit: unit.name, duration: `${scaledMs(durationSec, k)}ms`, ...vus };
  }
  const stages = [];
  let rate = pieces[0].fromRate;
  for (const piece of pieces) {
    if (piece.fromRate !== rate) stages.push({ duration: '0ms', target: unit.count(piece.fromRate) });
    stages.push({ duration: `${scaledMs(piece.toSec, k) - scaledMs(piece.fromSec, k)}ms`, target: unit.count(piece.toRate) });
    rate = piece.toRate;
  }
  return { executor: 'ramping-arrival-rate', startRate: unit.count(pieces[0].fromRate), timeUnit: unit.name, stages, ...vus };
}

/**
 * The pattern's rate over the scenario as linear pieces (unscaled seconds); a jump between pieces
 * becomes a k6 stage of 0 ms.
 */
function ratePieces(pattern, durationSec) {
  const piece = (fromSec, toSec, fromRate, toRate) => ({ fromSec, toSec, fromRate, toRate });
  const pieces =
    pattern.kind === 'constant'
      ? [piece(0, durationSec, pattern.rate, pattern.rate)]
      : pattern.kind === 'ramp'
        ? [piece(0, pattern.overSec, pattern.from, pattern.to), piece(pattern.overSec, durationSec, pattern.to, pattern.to)]
        : [
            piece(0, pattern.atSec, pattern.base, pattern.base),
            piece(pattern.atSec, pattern.atSec + pattern.forSec, pattern.peak, pattern.peak),
            piece(pattern.atSec + pattern.forSec, durationSec, pattern.base, pattern.base),
          ];
  return pieces.filter((p) => p.toSec > p.fromSec);
}

/**
 * k6 takes whole iterations per time unit: the shortest unit of 1, 10, 100 or 1000 s that makes
 * every rate whole, else 1000 s (rates then kept to a thousandth per second).
 */
function timeUnit(ratesPerSec) {
  const isWhole = (x) => Math.abs(x - Math.round(x)) < 1e-9;
  const sec = [1, 10, 100].find((s) => ratesPerSec.every((r) => isWhole(r * s))) ?? 1000;
  return { name: `${sec}s`, count: (ratePerSec) => Math.round(ratePerSec * sec) };
}

function sum(xs) {
  return xs.reduce((a, b) => a + b, 0);
}
