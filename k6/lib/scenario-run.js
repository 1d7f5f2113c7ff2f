/**
 * The k6 side of a load scenario: open-loop clients of POST /v1/runs, and the provider fault
 * timeline applied through the simulator's admin API. The options are scenario-options.js's.
 *
 * Environment: BASE_URL (Sluice's API, default http://127.0.0.1:8080), API_KEYS (JSON, tenant →
 * key; default the local tenants' keys), TIME_SCALE (k >= 1), SIM_URL (the provider simulator, e.g.
 * http://127.0.0.1:8089; without it the scenario runs without its faults) and SIM_ADMIN_KEY
 * (default local-admin-key).
 */
import http from 'k6/http';
import { check, sleep } from 'k6';
import exec from 'k6/execution';
import { Trend } from 'k6/metrics';
import { CONTRACT_CHECK_TAGS, CONTRACT_STATUSES, SUBMIT_TAGS, SUBMIT_TIMEOUT_SEC, answerTrendName, apiKeys, clientDelaysSec, timeScale } from './scenario-options.js';

/** An input per workflow of config/local.yaml; other workflows are sent an empty one. */
const SAMPLE_INPUTS = {
  'support-reply': { message: 'Where is order 42?', orderId: '42' },
  'report-digest': { request: 'daily sales and refunds digest' },
};

const RUN_CLASSES = ['interactive', 'batch'];
/** A client resends after a refusal or a transport error (no answer: status 0), never after another answer. */
const RESENT_AFTER = [0, 429, 503];

/**
 * The functions a scenario's script exports. k6 gives each of its scenarios its own `__ENV` (the
 * stream, or the fault change), so they read the global when they run, not a copy taken at init.
 */
export function scenarioRun(def) {
  const baseUrl = __ENV.BASE_URL || 'http://127.0.0.1:8080';
  const simUrl = __ENV.SIM_URL;
  const simParams = { headers: { Authorization: `Bearer ${__ENV.SIM_ADMIN_KEY || 'local-admin-key'}`, 'Content-Type': 'application/json' }, tags: { call: 'sim-admin' } };
  const keys = apiKeys(__ENV);
  const keyless = [...new Set(def.arrivals.map((s) => s.tenant).filter((tenant) => keys[tenant] === undefined))];
  if (keyless.length > 0) throw new Error(`API_KEYS has no key for ${keyless.join(', ')}`);
  const delaysSec = clientDelaysSec(def, timeScale(__ENV));
  const answerTrends = Object.fromEntries(RUN_CLASSES.map((runClass) => [runClass, new Trend(answerTrendName(runClass), true)]));
  const contractAnswers = http.expectedStatuses(...CONTRACT_STATUSES);

  function send(body, params) {
    const res = http.post(`${baseUrl}/v1/runs`, body, params);
    check(
      res,
      {
        'answer follows the overload contract': (r) => CONTRACT_STATUSES.includes(r.status),
        'refusals say when to come back': (r) => r.status === 202 || r.headers['Retry-After'] !== undefined,
      },
      CONTRACT_CHECK_TAGS,
    );
    return res;
  }

  /** A PUT /admin/faults the simulator refuses leaves the scenario not what it says: the test stops. */
  function putFault(body) {
    const res = http.put(`${simUrl}/admin/faults`, JSON.stringify(body), simParams);
    if (res.status !== 200) exec.test.abort(`PUT ${simUrl}/admin/faults ${JSON.stringify(body)}: HTTP ${res.status}`);
  }

  /** Puts back a profile read in setup; a profile without limits clears any a window set. */
  function restore(target, profile) {
    putFault({ target, rateLimit: null, ...profile });
  }

  return {
    /** Reads the faulted targets' profiles, to put them back when their windows end. */
    setup() {
      if (def.faults.length === 0) return { baselines: {} };
      if (simUrl === undefined) {
        console.warn(`${def.name}: SIM_URL is not set, so this run has none of the scenario's provider faults`);
        return { baselines: {} };
      }
      const res = http.get(`${simUrl}/admin/faults`, { ...simParams, responseType: 'text' });
      if (res.status !== 200) exec.test.abort(`GET ${simUrl}/admin/faults: HTTP ${res.status}`);
      const profiles = res.json();
      const targets = [...new Set(def.faults.map((f) => f.target))];
      const unknown = targets.filter((target) => profiles[target] === undefined);
      if (unknown.length > 0) exec.test.abort(`the simulator at ${simUrl} has no fault target ${unknown.join(', ')}`);
      return { baselines: Object.fromEntries(targets.map((target) => [target, profiles[target]])) };
    },

    /** One offered request of the stream: sent, and resent after the scenario's client delays. */
    submit() {
      const runClass = __ENV.STREAM_CLASS;
      const workflow = __ENV.STREAM_WORKFLOW;
      const body = JSON.stringify({ workflow, input: SAMPLE_INPUTS[workflow] ?? {}, class: runClass, deadlineMs: def.deadlineSec[runClass] * 1000 });
      const params = {
        headers: { Authorization: `Bearer ${keys[__ENV.STREAM_TENANT]}`, 'Content-Type': 'application/json' },
        tags: SUBMIT_TAGS,
        responseCallback: contractAnswers,
        timeout: `${SUBMIT_TIMEOUT_SEC}s`,
      };
      const firstSentMs = Date.now();
      let res = send(body, params);
      for (const delaySec of delaysSec) {
        if (!RESENT_AFTER.includes(res.status)) break;
        sleep(delaySec);
        res = send(body, params);
      }
      answerTrends[runClass].add(Date.now() - firstSentMs);
    },

    /**
     * One change of the fault timeline: the patch in force goes over the simulator's configured
     * baseline (as PUT /admin/faults does); with none in force, the profile read in setup comes back.
     */
    setFault(data) {
      const target = __ENV.FAULT_TARGET;
      if (__ENV.FAULT_PATCH === undefined) restore(target, data.baselines[target]);
      else putFault({ target, ...JSON.parse(__ENV.FAULT_PATCH) });
    },

    /** A run stopped inside a window (Ctrl-C, an abort) leaves no fault behind. */
    teardown(data) {
      for (const [target, profile] of Object.entries(data.baselines)) restore(target, profile);
    },
  };
}
