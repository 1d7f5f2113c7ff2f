import { Command } from 'commander';
import { benchAdmission } from './admission-bench.js';
import { startBareServer } from './bare-server.js';

const numbers = (v: string) =>
  v.split(',').map((s) => {
    const n = Number(s);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`not a positive number: ${s}`);
    return n;
  });

const program = new Command('sluice-bench').description('Sluice benchmarks: figures as ratios against a baseline measured in the same run');

program
  .command('admission')
  .description('p50/p99 of the admission reject and accept paths vs a bare Fastify route, open-loop')
  .option('--rates <list>', 'requests per second, comma-separated', numbers, [200, 500, 1000])
  .option('--duration <sec>', 'seconds per measurement', Number, 5)
  .option('--warmup <sec>', 'seconds of warm-up per target', Number, 2)
  .action((o: { rates: number[]; duration: number; warmup: number }) => benchAdmission({ rates: o.rates, durationSec: o.duration, warmupSec: o.warmup }));

program
  .command('bare-server', { hidden: true })
  .requiredOption('--port <port>', 'port', Number)
  .action(async (o: { port: number }) => {
    const stop = await startBareServer(o.port);
    await new Promise((resolve) => process.once('SIGTERM', resolve));
    await stop();
  });

program.parseAsync(process.argv).then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`sluice-bench: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
