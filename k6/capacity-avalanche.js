// The capacity-avalanche load scenario (k6/scenarios/capacity-avalanche.json) as k6 runs it: k6 run k6/capacity-avalanche.js
// Environment as for k6/baseline.js; docs/scenarios.md ("k6") tells what k6 measures and what it cannot.
import { k6Options } from './lib/scenario-options.js';
import { scenarioRun } from './lib/scenario-run.js';

const def = JSON.parse(open('./scenarios/capacity-avalanche.json'));
export const options = k6Options(def, __ENV);
export const { setup, submit, setFault, teardown } = scenarioRun(def);
