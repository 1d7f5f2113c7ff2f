import { Command } from 'commander';
import type { SluiceConfig } from '../../config/schema.js';
import { createLogger } from '../../obs/logger.js';
import { redactUrl } from '../../util/url.js';
import { infraDown, infraStatus, infraUp, type InfraOptions } from './local-infra.js';

const INFRA_ACTIONS = {
  up: {
    description: 'start what is not running; reuse what is',
    level: 'info',
    run: async (opts: InfraOptions) => {
      const endpoints = await infraUp(opts);
      return { ...endpoints, redisUrl: redactUrl(endpoints.redisUrl), databaseUrl: redactUrl(endpoints.databaseUrl) };
    },
  },
  down: { description: 'stop only what `infra up` started', level: 'info', run: infraDown },
  status: { description: 'what runs, who owns it, pids and ports', level: 'warn', run: infraStatus },
} as const;

/** `sluice infra up|down|status`; the state dir comes from the config, loaded as every command loads it. */
export function infraCommand(deps: { loadConfig: (path: string | undefined) => SluiceConfig }): Command {
  const infra = new Command('infra').description('local Kafka (from Maven jars), Redis and Postgres without Docker');
  for (const [name, action] of Object.entries(INFRA_ACTIONS)) {
    infra
      .command(name)
      .description(action.description)
      .option('-c, --config <file>', 'config file')
      .action(async (opts: { config?: string }) => {
        const result = await action.run({ stateDir: deps.loadConfig(opts.config).stateDir, logger: createLogger(action.level) });
        process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
      });
  }
  return infra;
}
