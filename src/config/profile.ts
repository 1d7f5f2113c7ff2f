import { sha256Hex } from '../util/sha256-hex.js';
import { ConfigError } from './load.js';
import type { SluiceConfig } from './schema.js';
import { stepDependencies } from './workflows.js';

/**
 * What the production profile (the default) refuses to start with, and why: each of these is
 * right for a demo on a laptop and wrong for anything reachable. The dev profile allows them.
 */

/** The keys config/local.yaml and the README publish: anyone can present them. */
export const DEMO_KEYS = ['local-key-a', 'local-key-b', 'local-key-c', 'local-admin-key'] as const;
const DEMO_KEY_BY_DIGEST = new Map<string, string>(DEMO_KEYS.map((k) => [sha256Hex(k), k]));

/** The ingress secrets config/local.yaml and the README publish: anyone can sign with them. */
export const DEMO_INGRESS_SECRETS = ['local-ingress-secret-a'] as const;

/** A reason the production profile refuses the config, named by its field like a config error. */
export interface ProfileProblem {
  field: string;
  message: string;
}

/** Dependencies some workflow step calls; a declared but unused one is never called. */
function calledDependencies(config: SluiceConfig): Set<string> {
  return new Set(Object.values(config.workflows).flatMap((wf) => wf.steps.flatMap(stepDependencies)));
}

/**
 * The processor would answer LLM steps from the provider simulator: some step calls an LLM, and
 * neither an API key nor an endpoint of the operator's choosing is configured.
 */
export function llmFromSimulator(config: SluiceConfig): boolean {
  if (!config.roles.includes('processor') || config.anthropic.apiKey || config.anthropic.baseUrl) return false;
  return [...calledDependencies(config)].some((d) => config.dependencies[d]?.kind === 'llm');
}

/** Every reason the config may not run under the production profile; none under dev. */
export function productionProblems(config: SluiceConfig): ProfileProblem[] {
  if (config.profile !== 'production') return [];
  const problems: ProfileProblem[] = [];
  const demoKey = (field: string, digest: string) => {
    const key = DEMO_KEY_BY_DIGEST.get(digest);
    if (key) problems.push({ field, message: `is the digest of the published demo key "${key}": anyone can use it; give it a key of its own` });
  };
  for (const [tenantId, tenant] of Object.entries(config.tenants)) demoKey(`tenants.${tenantId}.apiKeySha256`, tenant.apiKeySha256);
  demoKey('api.adminKeySha256', config.api.adminKeySha256);
  if (config.roles.includes('provider-sim')) {
    problems.push({ field: 'roles', message: 'include provider-sim, which answers LLM and tool calls with made-up data; list the others (e.g. SLUICE_ROLES=api,processor,status-sink,dlq-sink,lag-monitor)' });
  }
  if (llmFromSimulator(config)) {
    problems.push({ field: 'anthropic.apiKey', message: 'is not set, so LLM steps would be answered by the provider simulator; set ANTHROPIC_API_KEY (or anthropic.baseUrl for an endpoint of your own)' });
  }
  if (config.roles.includes('processor')) {
    for (const name of calledDependencies(config)) {
      const dep = config.dependencies[name];
      if (dep?.kind === 'tool' && dep.url.startsWith('/')) problems.push({ field: `dependencies.${name}.url`, message: `is a provider-simulator path (${dep.url}); give the tool's http(s) URL` });
    }
  }
  if (config.localInfra) {
    problems.push({ field: 'localInfra', message: 'starts single-node Kafka, Redis and Postgres on this machine for development; set it to false and point KAFKA_BROKERS, REDIS_URL and DATABASE_URL at your own' });
  }
  return problems;
}

/**
 * Tenants whose ingress secret, as read (`readIngressSecrets`), is a published demo secret: the
 * production profile refuses them as it refuses the demo API keys. None under dev.
 */
export function demoSecretProblems(config: Pick<SluiceConfig, 'profile'>, secrets: ReadonlyMap<string, Buffer>): ProfileProblem[] {
  if (config.profile !== 'production') return [];
  return [...secrets]
    .filter(([, secret]) => DEMO_INGRESS_SECRETS.some((demo) => secret.equals(Buffer.from(demo, 'utf8'))))
    .map(([tenantId, secret]) => ({ field: `tenants.${tenantId}.ingress`, message: `holds the published demo ingress secret "${secret.toString('utf8')}": anyone can sign for this tenant; give it a secret of its own` }));
}

/** The production profile's refusal as a config error (exit 2), one line per field. */
export function profileError(problems: readonly ProfileProblem[]): ConfigError {
  const lines = problems.map((p) => `  ${p.field}: ${p.message}`);
  return new ConfigError(
    `the production profile refuses this configuration:\n${lines.join('\n')}\nFor a local demo choose the dev profile: profile: dev in the file, or SLUICE_PROFILE=dev.`,
    problems.map((p) => p.field),
  );
}
