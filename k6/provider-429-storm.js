// The provider-429-storm load scenario (k6/scenarios/provider-429-storm.json) as k6 runs it: k6 run k6/provider-429-storm.js
// Environment as for k6/baseline.js; docs/scenarios.md ("k6") tells what k6 measures and what it cannot.
import { k6Options } from './lib/scenario-options.js';
import { scenarioRun } from './lib/scenario-run.js';

const def = JSON.parse(open('./scenarios/provider-429-storm.json'));
export const options = k6Options(def, __ENV);
export const { setup, submit, setFault, teardown } = scenarioRun(def);
