import { Command, InvalidArgumentError, Option } from 'commander';
import { runDemo } from './demo.js';

/** The demo tenant's published ingress secret (config/demo-ingress-secret-tenant-a). */
const DEMO_INGRESS_SECRET = 'local-ingress-secret-a';

function count(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1) throw new InvalidArgumentError('must be a whole number from 1');
  return n;
}

/**
 * `sluice demo`: runs against a Sluice already started with the demo config (`npm start`), and
 * exits 0 when every run ended as expected, `exit.failure` otherwise.
 */
export function demoCommand(deps: { exit: { failure: number } }): Command {
  return new Command('demo')
    .description('show the overload contract through the client library against a running local Sluice (demo config)')
    .addOption(new Option('--api-url <url>', "Sluice's API").default('http://127.0.0.1:8080'))
    .addOption(new Option('--brokers <list>', 'Kafka bootstrap brokers, comma-separated').env('KAFKA_BROKERS').default('127.0.0.1:9092'))
    .addOption(new Option('--runs <n>', 'runs to submit through the Kafka ingress').argParser(count).default(3))
    .addOption(new Option('--burst <n>', "submissions sent at once by tenant-b: more than its bucket (60 in the demo config)").argParser(count).default(100))
    .addOption(new Option('--timeout-ms <ms>', 'bound on every wait').argParser(count).default(60_000))
    .addOption(new Option('--ingress-secret <secret>', "tenant-a's ingress secret").default(DEMO_INGRESS_SECRET))
    .addOption(new Option('--namespace <prefix>', "Sluice's topic prefix").env('SLUICE_NAMESPACE'))
    .addOption(new Option('--schema-registry <url>', "Sluice's schema registry (default: the file registry under SLUICE_STATE_DIR or .sluice)").env('SCHEMA_REGISTRY_URL'))
    .action(async (opts: { apiUrl: string; brokers: string; runs: number; burst: number; timeoutMs: number; ingressSecret: string; namespace?: string; schemaRegistry?: string }) => {
      const result = await runDemo(
        {
          apiUrl: opts.apiUrl,
          brokers: opts.brokers.split(',').map((b) => b.trim()).filter(Boolean),
          runs: opts.runs,
          burst: opts.burst,
          timeoutMs: opts.timeoutMs,
          ingressSecret: opts.ingressSecret,
          namespace: opts.namespace,
          registryUrl: opts.schemaRegistry,
        },
        (line) => process.stdout.write(`${line}\n`),
      );
      process.exit(result.problems.length === 0 ? 0 : deps.exit.failure);
    });
}
