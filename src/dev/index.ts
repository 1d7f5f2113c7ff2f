/**
 * All the product takes from the development tooling: the provider simulator (the `provider-sim`
 * role), local Kafka, Redis and Postgres for a config with `localInfra: true`, and the `sluice
 * infra` and `sluice demo` commands. Code outside src/dev reaches src/dev only through this file; the benchmarks are
 * not reached at all.
 */
export { demoCommand } from './demo/demo-command.js';
export { infraCommand } from './infra/infra-command.js';
export { withLocalInfra } from './infra/local-infra.js';
export { createProviderSim } from './sim/provider-sim.js';
