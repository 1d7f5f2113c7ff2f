/**
 * All the product takes from the development tooling: the provider simulator (the `provider-sim`
 * role), local Kafka, Redis and Postgres for a config with `localInfra: true`, and the `sluice
 * infra` command. Code outside src/dev reaches src/dev only through this file; the benchmarks are
 * not reached at all.
 */
export { infraCommand } from './infra/infra-command.js';
export { withLocalInfra } from './infra/local-infra.js';
export { createProviderSim } from './sim/provider-sim.js';
