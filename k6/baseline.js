// The baseline load scenario (k6/scenarios/baseline.json) as k6 runs it, open loop: requests arrive
// at the scenario's rates whatever the latency, so a slow Sluice shows up as growing latency and
// dropped iterations instead of a politely slower client. Run: k6 run k6/baseline.js
//   BASE_URL   Sluice's API (default http://127.0.0.1:8080)
//   API_KEYS   JSON, tenant → API key (default the local keys: {"tenant-a":"local-key-a",...})
//   TIME_SCALE k >= 1 divides every duration and instant of the scenario, rates unchanged (default 1)
//   SIM_URL    the provider simulator (e.g. http://127.0.0.1:8089): set it to apply the scenario's
//              provider faults; SIM_ADMIN_KEY its admin key (default local-admin-key)
// The other scenarios' scripts take the same; docs/scenarios.md ("k6") tells what k6 cannot measure.
import { k6Options } from './lib/scenario-options.js';
import { scenarioRun } from './lib/scenario-run.js';

const def = JSON.parse(open('./scenarios/baseline.json'));
export const options = k6Options(def, __ENV);
export const { setup, submit, setFault, teardown } = scenarioRun(def);
