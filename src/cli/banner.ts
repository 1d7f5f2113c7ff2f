import type { Role, SluiceConfig } from '../config/schema.js';
import { redactUrl } from '../util/url.js';
import type { RunningRoles } from '../roles/start-roles.js';

/** The roles `sluice demo` needs; the banner offers it where they all run in this process, as under `npm start`. */
const DEMO_ROLES: readonly Role[] = ['api', 'ingress', 'processor', 'status-sink'];

/** `sluice demo`'s flags for where this instance differs from its defaults. */
function demoCommandLine(config: SluiceConfig, apiUrl: string): string {
  const brokers = config.kafka.brokers.join(',');
  return ['npx sluice demo', apiUrl === 'http://127.0.0.1:8080' ? '' : ` --api-url ${apiUrl}`, brokers === '127.0.0.1:9092' ? '' : ` --brokers ${brokers}`].join('');
}

/** The human-readable "where to look" printed once at start-up (logs stay JSON). */
export function startBanner(config: SluiceConfig, running: RunningRoles): string {
  const lines = [`Sluice is running (${config.profile} profile): roles ${running.roles.join(', ')}`];
  if (running.apiUrl) {
    const adminKey = config.profile === 'dev' ? 'local-admin-key' : '<admin key>';
    lines.push(`  API          ${running.apiUrl}   (POST /v1/runs, GET /v1/runs/:id)`, `  metrics      ${running.apiUrl}/metrics   (Authorization: Bearer ${adminKey})   readiness ${running.apiUrl}/readyz`);
    if (config.api.console.enable) lines.push(`  console      ${running.apiUrl}/console   (log in with the admin key${config.profile === 'dev' ? ': local-admin-key' : ''})`);
    // The demo key works only where the demo config runs.
    if (config.profile === 'dev') {
      if (DEMO_ROLES.every((role) => running.roles.includes(role)) && config.tenants['tenant-a']?.ingress) {
        lines.push(`  next         ${demoCommandLine(config, running.apiUrl)}   (in another terminal; or npm run sluice -- demo): the client library against this instance`);
      }
      lines.push(
        '  try it:',
        `    curl -s -X POST ${running.apiUrl}/v1/runs -H 'Authorization: Bearer local-key-a' \\`,
        `         -H 'Content-Type: application/json' -d '{"workflow":"support-reply","input":{"message":"Where is order 42?"}}'`,
        `    curl -s ${running.apiUrl}/v1/runs/<runId> -H 'Authorization: Bearer local-key-a'`,
        `  an agent choosing its tools: "workflow":"support-agent"; watch its turns with`,
        `    curl -sN ${running.apiUrl}/v1/runs/<runId>/events -H 'Authorization: Bearer local-key-a'`,
      );
      // The demo tenant's published ingress secret, where the demo config gives it one.
      if (running.roles.includes('ingress') && config.tenants['tenant-a']?.ingress) {
        lines.push(`  through Kafka: SluiceProducer ('sluice/producer') as tenant-a, secret 'local-ingress-secret-a', brokers ${config.kafka.brokers.join(',')} (README, Client library)`);
      }
    }
  }
  if (running.opsUrl) lines.push(`  ops          ${running.opsUrl}/metrics   readiness ${running.opsUrl}/readyz   (no credentials: keep this port internal)`);
  if (running.simulatorUrl) lines.push(`  simulator    ${running.simulatorUrl}   (PUT /admin/faults, GET /admin/stats with the admin key)`);
  lines.push(`  Kafka        ${config.kafka.brokers.join(',')}   Redis ${config.redis.cluster ? `cluster ${config.redis.cluster.join(',')}` : redactUrl(config.redis.url)}   Postgres ${redactUrl(config.postgres.url)}`);
  lines.push(`  local state  ${config.stateDir}/ (broker log: ${config.stateDir}/kafka/logs/server.log)`, '  stop with Ctrl-C (drains running work first)', '');
  return `${lines.join('\n')}\n`;
}
