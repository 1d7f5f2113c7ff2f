#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { Command, Option } from 'commander';
import { ConfigError, loadConfig } from '../config/load.js';
import type { SluiceConfig } from '../config/schema.js';
import { createLogger } from '../obs/logger.js';
import { demoCommand, infraCommand, withLocalInfra } from '../dev/index.js';
import { redactConfig } from '../config/redact.js';
import { demoSecretProblems, productionProblems, profileError } from '../config/profile.js';
import { readIngressSecrets } from '../ingress/ingress-secrets.js';
import { startRoles } from '../roles/start-roles.js';
import { startBanner } from './banner.js';
import { dlqCommand } from './dlq-command.js';
import { lagCommand } from './lag-command.js';
import { usageCommand } from './usage-command.js';

/**
 * Exit codes scripts can rely on: 0 done; 1 a runtime failure (a service unreachable, some
 * replays failed); 2 a bad config or command line; 3 (`sluice dlq`) some given rows were not
 * found, not pending or refused, the others were handled. `sluice lag` exits by the worst status
 * it shows instead (0 OK, 1 WARN, 2 STALL, STOP, REWIND or an error: see lag-command.ts).
 */
export const EXIT = { ok: 0, failure: 1, badConfig: 2, usage: 2, partial: 3 } as const;

/** The config, or exit 2 naming every bad field; `toStart` also applies the profile's refusals. */
function configOrExit(path: string | undefined, opts: { toStart?: boolean } = {}): SluiceConfig {
  try {
    const config = loadConfig({ path });
    if (!opts.toStart) return config;
    // Secrets that cannot be read stop the start here, before anything runs (the role reads them again).
    const secrets = config.roles.includes('ingress') ? readIngressSecrets(config, { env: process.env, readFile: (file) => readFileSync(file) }) : new Map<string, Buffer>();
    const problems = [...productionProblems(config), ...demoSecretProblems(config, secrets)];
    if (problems.length > 0) throw profileError(problems);
    return config;
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`sluice: ${err.message}\n`);
      process.exit(EXIT.badConfig);
    }
    throw err;
  }
}

async function start(opts: { config?: string; roles?: string }): Promise<void> {
  if (opts.roles) process.env.SLUICE_ROLES = opts.roles;
  const loaded = configOrExit(opts.config, { toStart: true });
  const logger = createLogger(loaded.logLevel);
  if (loaded.profile === 'dev') logger.warn({ profile: loaded.profile }, 'dev profile: demo keys, the provider simulator and local infrastructure are allowed; never expose this instance');
  else logger.info({ profile: loaded.profile }, 'production profile');
  const config = await withLocalInfra(loaded, logger);
  const running = await startRoles(config, logger);

  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting without draining');
      process.exit(EXIT.failure);
    }
    stopping = true;
    logger.info({ signal }, 'draining and stopping');
    running.stop().then(
      () => process.exit(EXIT.ok),
      (err: unknown) => {
        logger.error({ err }, 'stop failed');
        process.exit(EXIT.failure);
      },
    );
  };
  // Before announcing the start: whoever waits for it may signal at once.
  process.on('SIGINT', () => shutdown('SIGINT'));
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.stdout.write(startBanner(config, running));
  logger.info({ roles: running.roles, apiUrl: running.apiUrl, simulatorUrl: running.simulatorUrl, opsUrl: running.opsUrl, profile: config.profile }, 'sluice started');
}

const program = new Command('sluice').description('Kafka stream processor for AI-agent work with explicit backpressure').showHelpAfterError();

program
  .command('start')
  .description('start the configured roles (all of them by default) in this process')
  .option('-c, --config <file>', 'config file (default: SLUICE_CONFIG or the built-in config/local.yaml)')
  .addOption(new Option('-r, --roles <list>', 'comma-separated roles, overriding the config').env('SLUICE_ROLES'))
  .action(start);

program
  .command('config')
  .description('validate a config file and print it with defaults filled in (secrets shown as ***)')
  .option('-c, --config <file>', 'config file')
  .action((opts: { config?: string }) => {
    const config = configOrExit(opts.config);
    process.stdout.write(`${JSON.stringify(redactConfig(config), null, 2)}\n`);
    // Valid, but `start` would refuse it: say so without failing, as the file itself is sound.
    for (const p of productionProblems(config)) process.stderr.write(`sluice: warning: \`sluice start\` would refuse this under the production profile: ${p.field}: ${p.message}\n`);
  });

program.addCommand(infraCommand({ loadConfig: configOrExit }));
program.addCommand(demoCommand({ exit: EXIT }));
program.addCommand(dlqCommand({ loadConfig: configOrExit, exit: EXIT }));
program.addCommand(lagCommand({ loadConfig: configOrExit }));
program.addCommand(usageCommand({ loadConfig: configOrExit, exit: EXIT }));

program.parseAsync(process.argv).catch((err: unknown) => {
  process.stderr.write(`sluice: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(EXIT.failure);
});
