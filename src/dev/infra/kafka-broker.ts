import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync } from 'node:fs';
import { mkdir, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Kafka, logLevel } from 'kafkajs';
import type { Logger } from '../../obs/logger.js';
import { defaultReplication } from '../../kafka/replication.js';
import { withLock } from './lock.js';
import {
  findExecutable,
  inspectPidFile,
  isPortOpen,
  runChecked,
  tailFile,
  terminate,
  waitFor,
  writePidFile,
} from './process.js';
import { withTimeout } from '../../util/with-timeout.js';

/**
 * A KRaft Kafka cluster run from the Apache jars on Maven Central (no Docker, no tarball): one
 * node, or several, each a combined broker and controller, so any majority of them keeps the
 * controller quorum. A single node lives in `<stateDir>/kafka`, node i of an n-node cluster in
 * `<stateDir>/kafka-<n>-nodes/node-<i>`, so clusters of different sizes never share data. The
 * jars are shared by every state dir.
 */

const MVN_TIMEOUT_MS = 10 * 60_000; // a cold ~60 MB download on a slow link
const FORMAT_TIMEOUT_MS = 2 * 60_000;
const READY_TIMEOUT_MS = 90_000;
// How long a port that is already open gets to prove it is a Kafka broker (it may be starting).
const FOREIGN_BROKER_PROBE_MS = 15_000;
// A combined broker/controller shuts down in a few seconds; this leaves room for a slow disk.
const STOP_GRACE_MS = 30_000;
// A cluster stops all its nodes at once; the last to go has lost the controller quorum, which its
// controlled shutdown waits for in vain, so it is killed sooner (its log recovers on the next start).
const CLUSTER_STOP_GRACE_MS = 8_000;
const JARS_MARKER = '.sluice-jars.json';

/** One node of the cluster: its id, client port and controller port. */
export interface BrokerNode {
  nodeId: number;
  port: number;
  controllerPort: number;
}

export interface ClusterOptions {
  stateDir: string;
  /** Every node of the cluster, ids 1..n. */
  nodes: BrokerNode[];
  logger: Logger;
  /** Directory holding pom.xml, log4j2.properties and libs/; defaults to the repo's infra/kafka. */
  kafkaHome?: string;
}

export interface ClusterHandle {
  brokers: string[];
  /** The nodes with their pids, when the cluster is ours (started from this state dir). */
  nodes: (BrokerNode & { pid: number })[];
  /** True if this call started any node. */
  started: boolean;
  /** True if it was started from this state dir, now or earlier; only then may `down` stop it. */
  owned: boolean;
}

/** `count` nodes from the base ports, two ports apart: 9092/9093, 9094/9095, 9096/9097... */
export function clusterNodes(count: number, port: number, controllerPort: number): BrokerNode[] {
  return Array.from({ length: count }, (_, i) => ({ nodeId: i + 1, port: port + 2 * i, controllerPort: controllerPort + 2 * i }));
}

export const brokerList = (nodes: readonly BrokerNode[]): string[] => nodes.map((n) => `127.0.0.1:${n.port}`);

export interface BrokerPaths {
  dir: string;
  dataDir: string;
  propertiesFile: string;
  pidFile: string;
  /** JVM stdout/stderr: crashes and errors from before logging is set up. */
  stdoutFile: string;
  logDir: string;
  serverLog: string;
}

const clusterDir = (clusterSize: number): string => (clusterSize === 1 ? 'kafka' : `kafka-${clusterSize}-nodes`);

/** Where node `nodeId` of a `clusterSize`-node cluster keeps its files (default: the single node). */
export function brokerPaths(stateDir: string, nodeId = 1, clusterSize = 1): BrokerPaths {
  // Absolute, because the pid check matches these paths against the broker's command line.
  const dir = resolve(stateDir, clusterDir(clusterSize), clusterSize === 1 ? '' : `node-${nodeId}`);
  const logDir = join(dir, 'logs');
  return {
    dir,
    dataDir: join(dir, 'data'),
    propertiesFile: join(dir, 'server.properties'),
    pidFile: join(dir, 'broker.pid'),
    stdoutFile: join(dir, 'broker.out'),
    logDir,
    serverLog: join(logDir, 'server.log'),
  };
}

/** The properties of `node` in a cluster of `nodes` (all of them controllers too). */
export function renderServerProperties(p: { node: BrokerNode; nodes: readonly BrokerNode[]; dataDir: string }): string {
  const { node } = p;
  // Internal topics and topics created without their own settings replicate as Sluice's do.
  const { replicationFactor: rf, minInsyncReplicas: isr } = defaultReplication(p.nodes.length);
  return [
    '# Written by `sluice infra up` on every start; edits are overwritten.',
    'process.roles=broker,controller',
    `node.id=${node.nodeId}`,
    `controller.quorum.voters=${p.nodes.map((n) => `${n.nodeId}@127.0.0.1:${n.controllerPort}`).join(',')}`,
    `listeners=PLAINTEXT://127.0.0.1:${node.port},CONTROLLER://127.0.0.1:${node.controllerPort}`,
    `advertised.listeners=PLAINTEXT://127.0.0.1:${node.port}`,
    'controller.listener.names=CONTROLLER',
    'listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT',
    'inter.broker.listener.name=PLAINTEXT',
    `log.dirs=${p.dataDir}`,
    `default.replication.factor=${rf}`,
    `min.insync.replicas=${isr}`,
    `offsets.topic.replication.factor=${rf}`,
    `transaction.state.log.replication.factor=${rf}`,
    `transaction.state.log.min.isr=${isr}`,
    `share.coordinator.state.topic.replication.factor=${rf}`,
    `share.coordinator.state.topic.min.isr=${isr}`,
    'group.initial.rebalance.delay.ms=0',
    // Topics are created deliberately, with their partition counts, never by a typo.
    'auto.create.topics.enable=false',
    '',
  ].join('\n');
}

/**
 * A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 characters), never
 * starting with "-": the storage tool would read such an id as an option and refuse to format
 * (1 start in 64 failed that way).
 */
export function newClusterId(random: (size: number) => Buffer = randomBytes): string {
  for (;;) {
    const id = random(16).toString('base64url');
    if (!id.startsWith('-')) return id;
  }
}

/** The repo's infra/kafka, found by walking up from this module (it runs from src/ and dist/). */
export function defaultKafkaHome(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const candidate = join(dir, 'infra', 'kafka');
    if (existsSync(join(candidate, 'pom.xml'))) return candidate;
    const parent = dirname(dir);
    if (parent === dir) throw new Error('cannot find infra/kafka/pom.xml above ' + fileURLToPath(import.meta.url));
    dir = parent;
  }
}

const classpath = (kafkaHome: string): string => join(kafkaHome, 'libs', '*');
const sha256 = (data: string | Buffer): string => createHash('sha256').update(data).digest('hex');

interface JarsMarker {
  pomSha256: string;
  jars: string[];
}

/**
 * True if libs/ holds every jar that the current pom.xml resolved to. The marker names the pom's
 * hash, so editing the pom (say, a new Kafka version) triggers a refetch.
 */
export async function jarsUpToDate(kafkaHome: string): Promise<boolean> {
  const libs = join(kafkaHome, 'libs');
  const [pom, markerRaw, present] = await Promise.all([
    readFile(join(kafkaHome, 'pom.xml')),
    readFile(join(libs, JARS_MARKER), 'utf8').catch(() => undefined),
    readdir(libs).catch(() => [] as string[]),
  ]);
  if (markerRaw === undefined) return false;
  try {
    const marker = JSON.parse(markerRaw) as JarsMarker;
    const have = new Set(present);
    return marker.pomSha256 === sha256(pom) && marker.jars.length > 0 && marker.jars.every((j) => have.has(j));
  } catch {
    return false;
  }
}

/** Fetches the broker's jars with Maven unless libs/ is complete; returns whether it fetched. */
export async function ensureKafkaJars(kafkaHome: string, logger: Logger): Promise<boolean> {
  if (await jarsUpToDate(kafkaHome)) return false;
  // libs/ is shared by every state dir, so the fetch has its own lock, keyed by the directory.
  const lock = join(tmpdir(), `sluice-kafka-jars-${sha256(kafkaHome).slice(0, 16)}.lock`);
  return withLock(lock, { timeoutMs: MVN_TIMEOUT_MS + 60_000, logger }, async () => {
    if (await jarsUpToDate(kafkaHome)) return false;
    const mvn = await findExecutable('mvn');
    if (!mvn) {
      throw new Error('Maven (mvn) is needed once to fetch the Kafka jars: apt-get install -y maven, or set KAFKA_BROKERS');
    }
    const libs = join(kafkaHome, 'libs');
    // Jars of a previous pom would end up on the classpath next to the new ones.
    await rm(libs, { recursive: true, force: true });
    logger.info({ kafkaHome }, 'fetching Kafka jars with Maven');
    const t0 = Date.now();
    await runChecked(mvn, ['-q', '-B', 'dependency:copy-dependencies'], { cwd: kafkaHome, timeoutMs: MVN_TIMEOUT_MS });
    const jars = (await readdir(libs)).filter((f) => f.endsWith('.jar')).sort();
    const marker: JarsMarker = { pomSha256: sha256(await readFile(join(kafkaHome, 'pom.xml'))), jars };
    await writeFile(join(libs, JARS_MARKER), `${JSON.stringify(marker, null, 2)}\n`);
    logger.info({ jars: jars.length, durationMs: Date.now() - t0 }, 'Kafka jars fetched');
    return true;
  });
}

async function findJava(): Promise<string> {
  const { env } = process;
  const path = [env.JAVA_HOME && join(env.JAVA_HOME, 'bin'), env.PATH].filter(Boolean).join(delimiter);
  const java = await findExecutable('java', { PATH: path });
  if (!java) {
    throw new Error('Java 17+ is needed to run the local Kafka broker: apt-get install -y openjdk-17-jre-headless, or set KAFKA_BROKERS');
  }
  return java;
}

const formatted = (paths: BrokerPaths): boolean => existsSync(join(paths.dataDir, 'meta.properties'));

/** The cluster id a node's storage was formatted with, if it was. */
async function formattedClusterId(paths: BrokerPaths): Promise<string | undefined> {
  const meta = await readFile(join(paths.dataDir, 'meta.properties'), 'utf8').catch(() => '');
  return /^cluster\.id=(.+)$/m.exec(meta)?.[1]?.trim();
}

/**
 * Formats each node's storage unless it already holds a formatted log, so topics survive
 * restarts. Every node of a cluster must carry one cluster id: a node formatted earlier lends its own.
 */
async function formatStorageOnce(java: string, kafkaHome: string, nodePaths: BrokerPaths[], logger: Logger): Promise<void> {
  const todo = nodePaths.filter((p) => !formatted(p));
  if (todo.length === 0) return;
  const ids = await Promise.all(nodePaths.filter(formatted).map(formattedClusterId));
  const clusterId = ids.find((id) => id !== undefined) ?? newClusterId();
  const t0 = Date.now();
  await Promise.all(
    todo.map((paths) =>
      runChecked(
        java,
        ['-cp', classpath(kafkaHome), 'kafka.tools.StorageTool', 'format', '-t', clusterId, '-c', paths.propertiesFile],
        { timeoutMs: FORMAT_TIMEOUT_MS },
      ),
    ),
  );
  logger.info({ clusterId, dataDirs: todo.map((p) => p.dataDir), durationMs: Date.now() - t0 }, 'Kafka storage formatted');
}

/**
 * True once a kafkajs admin client can list topics at `brokers`: the same path the application
 * takes, which a log line or an open port does not prove. With `groups`, the group coordinator
 * must answer too: right after a start it is still loading, and consumers that join then crash
 * and restart, so our own broker counts as ready only after that. (Not for brokers we do not
 * run: their ACLs may forbid describing groups.) With `clusterSize`, the metadata must list that
 * many brokers: a node answers before the others' registrations reach it, and topics created
 * then would get fewer copies.
 */
export async function probeKafka(brokers: string[], timeoutMs = 5_000, own: { groups?: boolean; clusterSize?: number } = {}): Promise<boolean> {
  const admin = new Kafka({
    clientId: 'sluice-infra-probe',
    brokers,
    logLevel: logLevel.NOTHING,
    connectionTimeout: 1_000,
    requestTimeout: 3_000,
    retry: { retries: 0 },
  }).admin();
  try {
    await withTimeout(
      (async () => {
        await admin.connect();
        await admin.listTopics();
        if (own.groups) await admin.describeGroups(['sluice-infra-probe']);
        if (own.clusterSize !== undefined && (await admin.describeCluster()).brokers.length < own.clusterSize) throw new Error('brokers missing from the metadata');
      })(),
      timeoutMs,
      'Kafka probe',
    );
    return true;
  } catch {
    return false;
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}

/** Polls `probeKafka` until it succeeds or `timeoutMs` passes (or `gaveUp` says why to stop). */
async function waitForKafka(
  brokers: string[],
  timeoutMs: number,
  opts: { groups: boolean; clusterSize?: number; gaveUp?: () => string | undefined },
) {
  return waitFor(timeoutMs, 500, async () => {
    if (opts.gaveUp?.()) return false;
    return (await probeKafka(brokers, 5_000, opts)) ? true : undefined;
  });
}

const brokerMarkers = (paths: BrokerPaths): string[] => ['kafka.Kafka', paths.propertiesFile];

/** Every node directory under the state dir, of whatever cluster size, with its node id. */
async function nodeDirs(stateDir: string): Promise<{ nodeId: number; clusterSize: number; paths: BrokerPaths }[]> {
  const single = brokerPaths(stateDir);
  const found = existsSync(single.dir) ? [{ nodeId: 1, clusterSize: 1, paths: single }] : [];
  for (const entry of await readdir(resolve(stateDir)).catch(() => [] as string[])) {
    const size = /^kafka-(\d+)-nodes$/.exec(entry)?.[1];
    if (size === undefined) continue;
    for (const node of await readdir(resolve(stateDir, entry)).catch(() => [] as string[])) {
      const id = /^node-(\d+)$/.exec(node)?.[1];
      if (id !== undefined) found.push({ nodeId: Number(id), clusterSize: Number(size), paths: brokerPaths(stateDir, Number(id), Number(size)) });
    }
  }
  return found;
}

export interface RunningNode {
  nodeId: number;
  clusterSize: number;
  pid: number;
}

/** The nodes started from this state dir that still run, whatever cluster they belong to. */
export async function runningNodes(stateDir: string): Promise<RunningNode[]> {
  const running: RunningNode[] = [];
  for (const n of await nodeDirs(stateDir)) {
    const s = await inspectPidFile(n.paths.pidFile, brokerMarkers(n.paths));
    if (s.state === 'running') running.push({ nodeId: n.nodeId, clusterSize: n.clusterSize, pid: s.pid });
  }
  return running.sort((x, y) => x.clusterSize - y.clusterSize || x.nodeId - y.nodeId);
}

interface Launched {
  pid: number;
  /** Why the process is gone, once it is. */
  exitReason: () => string | undefined;
}

/** Starts the JVM in its own session with output to a file, so it outlives this process. */
function launchBroker(java: string, kafkaHome: string, paths: BrokerPaths): Launched {
  const out = openSync(paths.stdoutFile, 'w');
  try {
    const args = [
      '-Xms256m',
      '-Xmx512m',
      '-XX:+UseG1GC',
      '-XX:MaxGCPauseMillis=20',
      '-XX:+ExitOnOutOfMemoryError',
      '-Djava.awt.headless=true',
      `-Dlog4j2.configurationFile=${join(kafkaHome, 'log4j2.properties')}`,
      `-Dkafka.logs.dir=${paths.logDir}`,
      '-cp',
      classpath(kafkaHome),
      'kafka.Kafka',
      paths.propertiesFile,
    ];
    const child = spawn(java, args, { cwd: paths.dir, detached: true, stdio: ['ignore', out, out] });
    let reason: string | undefined;
    child.once('exit', (code, signal) => (reason = `exited with ${signal ?? `code ${code}`}`));
    child.once('error', (err) => (reason = `failed to start: ${err.message}`));
    child.unref();
    if (child.pid === undefined) throw new Error(`could not start ${java}`);
    return { pid: child.pid, exitReason: () => reason };
  } finally {
    closeSync(out);
  }
}

/** The end of the broker's logs for an error message; long lines (partition lists) are cut. */
async function brokerLogTail(paths: BrokerPaths): Promise<string> {
  const [log, out] = await Promise.all([tailFile(paths.serverLog, 30), tailFile(paths.stdoutFile, 15)]);
  const cut = (text: string) => text.split('\n').map((l) => (l.length > 400 ? `${l.slice(0, 400)}…` : l)).join('\n');
  return [log && `--- ${paths.serverLog}\n${cut(log)}`, out && `--- ${paths.stdoutFile}\n${cut(out)}`]
    .filter(Boolean)
    .join('\n');
}

/**
 * Launches the given nodes of a cluster (the others already run) and waits until each answers.
 * All are launched before any is waited for: a node is ready only once a majority of the
 * controllers run. If any does not become ready, the nodes launched here are stopped again.
 */
async function startNodes(opts: ClusterOptions, toStart: BrokerNode[]): Promise<Map<number, number>> {
  const { logger, nodes } = opts;
  const kafkaHome = opts.kafkaHome ?? defaultKafkaHome();
  const java = await findJava();
  await ensureKafkaJars(kafkaHome, logger);
  const pathsOf = (n: BrokerNode) => brokerPaths(opts.stateDir, n.nodeId, nodes.length);
  for (const node of nodes) {
    const paths = pathsOf(node);
    await mkdir(paths.logDir, { recursive: true });
    await writeFile(paths.propertiesFile, renderServerProperties({ node, nodes, dataDir: paths.dataDir }));
  }
  await formatStorageOnce(java, kafkaHome, nodes.map(pathsOf), logger);

  const t0 = Date.now();
  const launched = new Map<number, Launched>();
  try {
    for (const node of toStart) {
      const broker = launchBroker(java, kafkaHome, pathsOf(node));
      launched.set(node.nodeId, broker);
      await writePidFile(pathsOf(node).pidFile, broker.pid);
    }
    const failures = await Promise.all(
      toStart.map(async (node) => {
        const broker = launched.get(node.nodeId)!;
        const ready = await waitForKafka(brokerList([node]), READY_TIMEOUT_MS, { groups: true, clusterSize: nodes.length, gaveUp: broker.exitReason });
        if (ready === true) return undefined;
        const why = broker.exitReason() ?? `did not answer within ${READY_TIMEOUT_MS} ms`;
        return `Kafka broker ${node.nodeId} on 127.0.0.1:${node.port} ${why}\n${await brokerLogTail(pathsOf(node))}`;
      }),
    );
    const failed = failures.filter((f): f is string => f !== undefined);
    if (failed.length > 0) throw new Error(failed.join('\n'));
  } catch (err) {
    await Promise.all(
      toStart.map(async (node) => {
        const broker = launched.get(node.nodeId);
        if (broker) await terminate(broker.pid, 5_000).catch(() => undefined);
        await rm(pathsOf(node).pidFile, { force: true });
      }),
    );
    throw err;
  }
  const pids = new Map([...launched].map(([id, l]) => [id, l.pid]));
  logger.info({ nodes: toStart.map((n) => ({ nodeId: n.nodeId, port: n.port, pid: pids.get(n.nodeId) })), readyMs: Date.now() - t0 }, 'Kafka brokers ready');
  return pids;
}

/**
 * Makes the cluster of `nodes` answer: the nodes this state dir started are reused if they run
 * and the others started, else a broker someone else runs on the first node's port is reused (not
 * owned), else all are started. Call it with the infra lock held.
 */
export async function ensureKafkaCluster(opts: ClusterOptions): Promise<ClusterHandle> {
  const { logger, nodes, stateDir } = opts;
  const brokers = brokerList(nodes);
  const other = (await runningNodes(stateDir)).find((n) => n.clusterSize !== nodes.length);
  if (other) {
    throw new Error(`a ${other.clusterSize}-broker cluster started from ${stateDir} runs (pid ${other.pid}); run \`sluice infra down\` first`);
  }

  const pids = new Map<number, number>();
  for (const node of nodes) {
    const paths = brokerPaths(stateDir, node.nodeId, nodes.length);
    const own = await inspectPidFile(paths.pidFile, brokerMarkers(paths));
    if (own.state === 'running') {
      const props = await readFile(paths.propertiesFile, 'utf8').catch(() => '');
      if (props !== renderServerProperties({ node, nodes, dataDir: paths.dataDir })) {
        throw new Error(
          `the broker started from ${stateDir} (pid ${own.pid}) runs with other ports (see ${paths.propertiesFile}); ` +
            'run `sluice infra down` first',
        );
      }
      pids.set(node.nodeId, own.pid);
    } else if (own.state === 'stale') {
      logger.warn({ pidFile: paths.pidFile, pid: own.pid }, 'removing stale Kafka pid file');
      await rm(paths.pidFile, { force: true });
    }
  }

  const first = nodes[0]!;
  if (pids.size === 0 && (await isPortOpen(first.port))) {
    if ((await waitForKafka([brokers[0]!], FOREIGN_BROKER_PROBE_MS, { groups: false })) === true) {
      logger.info({ port: first.port }, 'a Kafka broker we did not start answers on the port: using it, `down` will leave it running');
      return { brokers, nodes: [], started: false, owned: false };
    }
    throw new Error(`port ${first.port} is in use by a process that does not answer as a Kafka broker; free it or choose another port`);
  }
  const toStart = nodes.filter((n) => !pids.has(n.nodeId));
  for (const node of toStart) {
    for (const [what, port] of [['Kafka', node.port], ['Kafka controller', node.controllerPort]] as const) {
      if (await isPortOpen(port)) throw new Error(`${what} port ${port} (node ${node.nodeId}) is already in use; free it or choose another port`);
    }
  }
  if (toStart.length > 0) {
    for (const [id, pid] of await startNodes(opts, toStart)) pids.set(id, pid);
  }
  const reused = nodes.filter((n) => !toStart.includes(n));
  if (reused.length > 0) {
    const answers = await Promise.all(reused.map((n) => waitForKafka(brokerList([n]), READY_TIMEOUT_MS, { groups: true, clusterSize: nodes.length })));
    const silent = reused.filter((_, i) => answers[i] !== true);
    if (silent.length > 0) {
      const tails = await Promise.all(silent.map((n) => brokerLogTail(brokerPaths(stateDir, n.nodeId, nodes.length))));
      throw new Error(`our brokers (${silent.map((n) => `node ${n.nodeId} pid ${pids.get(n.nodeId)}`).join(', ')}) run but do not answer\n${tails.join('\n')}`);
    }
    logger.info({ nodes: reused.map((n) => n.nodeId) }, 'reusing the Kafka brokers started earlier from this state dir');
  }
  return { brokers, nodes: nodes.map((n) => ({ ...n, pid: pids.get(n.nodeId)! })), started: toStart.length > 0, owned: true };
}

/** Stops every broker started from this state dir (all at once: a quorum stops together); returns whether one ran. */
export async function stopKafka(stateDir: string, logger: Logger): Promise<boolean> {
  const dirs = await nodeDirs(stateDir);
  const ran = await Promise.all(
    dirs.map(async ({ nodeId, clusterSize, paths }) => {
      const own = await inspectPidFile(paths.pidFile, brokerMarkers(paths));
      if (own.state === 'running') {
        const t0 = Date.now();
        const how = await terminate(own.pid, clusterSize === 1 ? STOP_GRACE_MS : CLUSTER_STOP_GRACE_MS);
        logger.info({ nodeId, pid: own.pid, how, durationMs: Date.now() - t0 }, 'Kafka broker stopped');
      }
      await rm(paths.pidFile, { force: true });
      return own.state === 'running';
    }),
  );
  return ran.includes(true);
}
