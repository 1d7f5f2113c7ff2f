import { Command, InvalidArgumentError } from 'commander';
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

const MAX_BROKERS = 5;

function brokerCount(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > MAX_BROKERS) throw new InvalidArgumentError(`a whole number from 1 to ${MAX_BROKERS}`);
  return n;
}

/** `sluice infra up|down|status`; the state dir comes from the config, loaded as every command loads it. */
export function infraCommand(deps: { loadConfig: (path: string | undefined) => SluiceConfig }): Command {
  const infra = new Command('infra').description('local Kafka (from Maven jars), Redis and Postgres without Docker');
  for (const [name, action] of Object.entries(INFRA_ACTIONS)) {
    const command = infra
      .command(name)
      .description(action.description)
      .option('-c, --config <file>', 'config file');
    if (name === 'up') {
      command.option(
        '--brokers <n>',
        'Kafka brokers to run, each also a controller, on ports 9092, 9094, ... (default: as last started, else 1)',
        brokerCount,
      );
    }
    command.action(async (opts: { config?: string; brokers?: number }) => {
      const result = await action.run({ stateDir: deps.loadConfig(opts.config).stateDir, logger: createLogger(action.level), brokers: opts.brokers });
      process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
    });
  }
  return infra;
}
