// The weighted-share load scenario (k6/scenarios/weighted-share.json) as k6 runs it: k6 run k6/weighted-share.js
// Environment as for k6/baseline.js; docs/scenarios.md ("k6") tells what k6 measures and what it cannot.
import { k6Options } from './lib/scenario-options.js';
import { scenarioRun } from './lib/scenario-run.js';

const def = JSON.parse(open('./scenarios/weighted-share.json'));
export const options = k6Options(def, __ENV);
export const { setup, submit, setFault, teardown } = scenarioRun(def);
