import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { ensureExecutable } from '../../src/dev/infra/apt.js';
import { runChecked, terminate, waitFor } from '../../src/dev/infra/process.js';
import { redisServerPid } from '../../src/dev/infra/redis.js';
import { createLogger } from '../../src/obs/logger.js';
import { freePort } from '../../src/util/free-port.js';

const MASTERS = 3;
const START_TIMEOUT_MS = 15_000;
/** The machine's own Redis: a test never runs a cluster node there. */
const SHARED_REDIS_PORT = 6379;

export interface ThrowawayRedisCluster {
  /** The nodes, `127.0.0.1:<port>`, as `redis.cluster` / REDIS_CLUSTER take them. */
  nodes: string[];
  /** Stops every node (SIGTERM, SIGKILL after 5 s) and removes their files. */
  close: () => Promise<void>;
}

async function clusterState(port: number): Promise<string | undefined> {
  const client = new Redis({ host: '127.0.0.1', port, lazyConnect: true, connectTimeout: 1_000, commandTimeout: 1_000, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => undefined); // failures surface through the awaited calls
  try {
    await client.connect();
    return /^cluster_state:(\w+)/m.exec(await client.cluster('INFO'))?.[1];
  } catch {
    return undefined;
  } finally {
    client.disconnect();
  }
}

/**
 * A Redis Cluster of the test's own: three masters without replicas on free loopback ports,
 * persistence off, its node files in a temporary directory. Stopped by pid only; a process exit
 * hook kills the nodes should the test process die before `close`.
 */
export async function startThrowawayRedisCluster(): Promise<ThrowawayRedisCluster> {
  const logger = createLogger('warn', 'throwaway-redis-cluster');
  const { path: redisServer } = await ensureExecutable('redis-server', 'redis-server', 'run the cluster tests where redis-server is installed', logger);
  const { path: redisCli } = await ensureExecutable('redis-cli', 'redis-tools', 'run the cluster tests where redis-cli is installed', logger);
  const dir = await mkdtemp(join(tmpdir(), 'sluice-redis-cluster-'));
  const ports: number[] = [];
  while (ports.length < MASTERS) {
    const port = await freePort();
    if (port !== SHARED_REDIS_PORT && !ports.includes(port)) ports.push(port);
  }
  const children: ChildProcess[] = [];
  const killOnExit = () => children.forEach((c) => c.kill('SIGKILL'));
  process.once('exit', killOnExit);

  const close = async () => {
    await Promise.all(children.map((c) => (c.pid !== undefined && c.exitCode === null ? terminate(c.pid, 5_000) : undefined)));
    process.off('exit', killOnExit);
    await rm(dir, { recursive: true, force: true });
  };

  try {
    for (const port of ports) {
      const args = ['--port', String(port), '--bind', '127.0.0.1', '--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`), '--dir', dir, '--save', '', '--appendonly', 'no'];
      children.push(spawn(redisServer, args, { stdio: 'ignore' }));
    }
    for (const [i, port] of ports.entries()) {
      const answering = await waitFor(START_TIMEOUT_MS, 50, async () => ((await redisServerPid(`redis://127.0.0.1:${port}`, 500)) === children[i]!.pid ? true : undefined));
      if (!answering) throw new Error(`the cluster node on port ${port} did not answer within ${START_TIMEOUT_MS} ms`);
    }
    const nodes = ports.map((p) => `127.0.0.1:${p}`);
    await runChecked(redisCli, ['--cluster', 'create', ...nodes, '--cluster-replicas', '0', '--cluster-yes'], { timeoutMs: START_TIMEOUT_MS });
    for (const port of ports) {
      const ok = await waitFor(START_TIMEOUT_MS, 50, async () => ((await clusterState(port)) === 'ok' ? true : undefined));
      if (!ok) throw new Error(`the cluster node on port ${port} did not report cluster_state:ok within ${START_TIMEOUT_MS} ms`);
    }
    return { nodes, close };
  } catch (err) {
    await close();
    throw err;
  }
}
