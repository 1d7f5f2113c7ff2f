import { Command } from 'commander';
import { pino } from 'pino';
import type { SluiceConfig } from '../config/schema.js';
import { createLogger } from '../obs/logger.js';
import { SharedClients } from '../roles/shared-clients.js';
import { usageByWorkflow } from '../status/usage-report.js';
import { withTimeout } from '../util/with-timeout.js';
import { nonEmpty, parseWhen } from './dlq-arguments.js';
import { usageJson, usageTable } from './usage-output.js';

/** `sluice usage`: LLM tokens and cost of completed runs per tenant and workflow, from Postgres `run_usage`. */

const CLOSE_TIMEOUT_MS = 5_000;
const DEFAULT_WINDOW_MS = 86_400_000;

export interface UsageCommandDeps {
  loadConfig: (path: string | undefined) => SluiceConfig;
  exit: { ok: number; failure: number; usage: number };
}

interface UsageOptions {
  config?: string;
  since?: Date;
  tenant?: string;
  json?: boolean;
}

async function runUsage(deps: UsageCommandDeps, o: UsageOptions): Promise<never> {
  const config = deps.loadConfig(o.config);
  // stdout is the command's output: logs go to stderr.
  const clients = new SharedClients(config, createLogger('warn', 'sluice', pino.destination(2)));
  const query = { since: o.since ?? new Date(Date.now() - DEFAULT_WINDOW_MS), ...(o.tenant === undefined ? {} : { tenantId: o.tenant }) };
  let code = deps.exit.ok;
  try {
    const rows = await usageByWorkflow(await clients.pool(), { namespace: config.namespace, ...query });
    process.stdout.write(o.json ? `${usageJson(rows, query)}\n` : usageTable(rows, query));
  } catch (err) {
    process.stderr.write(`sluice usage: ${(err as Error).message}\n`);
    code = deps.exit.failure;
  }
  await withTimeout(clients.close(), CLOSE_TIMEOUT_MS, 'closing connections').catch(() => undefined);
  process.exit(code);
}

export function usageCommand(deps: UsageCommandDeps): Command {
  return (
    new Command('usage')
      .description('LLM tokens and cost of completed runs per tenant and workflow over a window (from Postgres)')
      .option('-c, --config <file>', 'config file')
      .option('--since <when>', 'runs completed since: a duration ago (30m, 6h, 1d, 7d) or an ISO 8601 time (default: 1d)', (raw: string) => parseWhen(raw, Date.now()))
      .option('--tenant <id>', 'only this tenant', nonEmpty)
      .option('--json', 'JSON instead of a table')
      // Commander exits 1 on a bad command line; scripts tell usage errors by exit code 2.
      .exitOverride((err) => process.exit(err.exitCode === 0 ? deps.exit.ok : deps.exit.usage))
      .action((o: UsageOptions) => runUsage(deps, o))
  );
}
