import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync } from 'node:fs';
import { mkdir, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Kafka, logLevel } from 'kafkajs';
import type { Logger } from '../../obs/logger.js';
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
 * A single-node KRaft Kafka broker run from the Apache jars on Maven Central (no Docker, no
 * tarball). Its files live in `<stateDir>/kafka`; the jars are shared by every state dir.
 */

const MVN_TIMEOUT_MS = 10 * 60_000; // a cold ~60 MB download on a slow link
const FORMAT_TIMEOUT_MS = 2 * 60_000;
const READY_TIMEOUT_MS = 90_000;
// How long a port that is already open gets to prove it is a Kafka broker (it may be starting).
const FOREIGN_BROKER_PROBE_MS = 15_000;
// A combined broker/controller shuts down in a few seconds; this leaves room for a slow disk.
const STOP_GRACE_MS = 30_000;
const JARS_MARKER = '.sluice-jars.json';

export interface BrokerOptions {
  stateDir: string;
  port: number;
  controllerPort: number;
  logger: Logger;
  /** Directory holding pom.xml, log4j2.properties and libs/; defaults to the repo's infra/kafka. */
  kafkaHome?: string;
}

export interface BrokerHandle {
  brokers: string[];
  /** Set when the broker is ours (started from this state dir). */
  pid?: number;
  /** True if this call started it. */
  started: boolean;
  /** True if it was started from this state dir, now or earlier; only then may `down` stop it. */
  owned: boolean;
}

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

export function brokerPaths(stateDir: string): BrokerPaths {
  // Absolute, because the pid check matches these paths against the broker's command line.
  const dir = resolve(stateDir, 'kafka');
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

export function renderServerProperties(p: { port: number; controllerPort: number; dataDir: string }): string {
  return [
    '# Written by `sluice infra up` on every start; edits are overwritten.',
    'process.roles=broker,controller',
    'node.id=1',
    `controller.quorum.voters=1@127.0.0.1:${p.controllerPort}`,
    `listeners=PLAINTEXT://127.0.0.1:${p.port},CONTROLLER://127.0.0.1:${p.controllerPort}`,
    `advertised.listeners=PLAINTEXT://127.0.0.1:${p.port}`,
    'controller.listener.names=CONTROLLER',
    'listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT',
    'inter.broker.listener.name=PLAINTEXT',
    `log.dirs=${p.dataDir}`,
    // One node: every internal topic must fit on it.
    'offsets.topic.replication.factor=1',
    'transaction.state.log.replication.factor=1',
    'transaction.state.log.min.isr=1',
    'share.coordinator.state.topic.replication.factor=1',
    'share.coordinator.state.topic.min.isr=1',
    'group.initial.rebalance.delay.ms=0',
    // Topics are created deliberately, with their partition counts, never by a typo.
    'auto.create.topics.enable=false',
    '',
  ].join('\n');
}

/** A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 characters). */
export function newClusterId(): string {
  return randomBytes(16).toString('base64url');
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

/** Formats the storage dir unless it already holds a formatted log, so topics survive restarts. */
async function formatStorageOnce(java: string, kafkaHome: string, paths: BrokerPaths, logger: Logger): Promise<void> {
  if (existsSync(join(paths.dataDir, 'meta.properties'))) return;
  const clusterId = newClusterId();
  const t0 = Date.now();
  await runChecked(
    java,
    ['-cp', classpath(kafkaHome), 'kafka.tools.StorageTool', 'format', '-t', clusterId, '-c', paths.propertiesFile],
    { timeoutMs: FORMAT_TIMEOUT_MS },
  );
  logger.info({ clusterId, dataDir: paths.dataDir, durationMs: Date.now() - t0 }, 'Kafka storage formatted');
}

/**
 * True once a kafkajs admin client can list topics at `brokers`: the same path the application
 * takes, which a log line or an open port does not prove. With `groups`, the group coordinator
 * must answer too: right after a start it is still loading, and consumers that join then crash
 * and restart, so our own broker counts as ready only after that. (Not for brokers we do not
 * run: their ACLs may forbid describing groups.)
 */
export async function probeKafka(brokers: string[], timeoutMs = 5_000, groups = false): Promise<boolean> {
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
        if (groups) await admin.describeGroups(['sluice-infra-probe']);
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
  opts: { groups: boolean; gaveUp?: () => string | undefined },
) {
  return waitFor(timeoutMs, 500, async () => {
    if (opts.gaveUp?.()) return false;
    return (await probeKafka(brokers, 5_000, opts.groups)) ? true : undefined;
  });
}

const brokerMarkers = (paths: BrokerPaths): string[] => ['kafka.Kafka', paths.propertiesFile];

/** The pid of the broker started from this state dir, if it still runs. */
export async function brokerPid(stateDir: string): Promise<number | undefined> {
  const paths = brokerPaths(stateDir);
  const s = await inspectPidFile(paths.pidFile, brokerMarkers(paths));
  return s.state === 'running' ? s.pid : undefined;
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

async function startBroker(opts: BrokerOptions, paths: BrokerPaths, brokers: string[]): Promise<number> {
  const { logger } = opts;
  const kafkaHome = opts.kafkaHome ?? defaultKafkaHome();
  const java = await findJava();
  await ensureKafkaJars(kafkaHome, logger);
  await mkdir(paths.logDir, { recursive: true });
  await writeFile(
    paths.propertiesFile,
    renderServerProperties({ port: opts.port, controllerPort: opts.controllerPort, dataDir: paths.dataDir }),
  );
  await formatStorageOnce(java, kafkaHome, paths, logger);

  const t0 = Date.now();
  const broker = launchBroker(java, kafkaHome, paths);
  await writePidFile(paths.pidFile, broker.pid);
  const ready = await waitForKafka(brokers, READY_TIMEOUT_MS, { groups: true, gaveUp: broker.exitReason });
  if (ready !== true) {
    await terminate(broker.pid, 5_000).catch(() => undefined);
    await rm(paths.pidFile, { force: true });
    const why = broker.exitReason() ?? `did not answer within ${READY_TIMEOUT_MS} ms`;
    throw new Error(`Kafka broker on 127.0.0.1:${opts.port} ${why}\n${await brokerLogTail(paths)}`);
  }
  logger.info({ pid: broker.pid, port: opts.port, readyMs: Date.now() - t0 }, 'Kafka broker ready');
  return broker.pid;
}

/**
 * Makes a broker answer on 127.0.0.1:`port`: the one this state dir started if it runs, else a
 * broker someone else runs on that port (reused, not owned), else a new one. Call it with the
 * infra lock held.
 */
export async function ensureBroker(opts: BrokerOptions): Promise<BrokerHandle> {
  const { logger, port, controllerPort } = opts;
  const paths = brokerPaths(opts.stateDir);
  const brokers = [`127.0.0.1:${port}`];

  const own = await inspectPidFile(paths.pidFile, brokerMarkers(paths));
  if (own.state === 'running') {
    const props = await readFile(paths.propertiesFile, 'utf8').catch(() => '');
    if (props !== renderServerProperties({ port, controllerPort, dataDir: paths.dataDir })) {
      throw new Error(
        `the broker started from ${opts.stateDir} (pid ${own.pid}) runs with other ports (see ${paths.propertiesFile}); ` +
          'run `sluice infra down` first',
      );
    }
    if ((await waitForKafka(brokers, READY_TIMEOUT_MS, { groups: true })) !== true) {
      throw new Error(`our broker (pid ${own.pid}) runs but does not answer on ${brokers[0]}\n${await brokerLogTail(paths)}`);
    }
    logger.info({ pid: own.pid, port }, 'reusing the Kafka broker started earlier from this state dir');
    return { brokers, pid: own.pid, started: false, owned: true };
  }
  if (own.state === 'stale') {
    logger.warn({ pidFile: paths.pidFile, pid: own.pid }, 'removing stale Kafka pid file');
    await rm(paths.pidFile, { force: true });
  }

  if (await isPortOpen(port)) {
    if ((await waitForKafka(brokers, FOREIGN_BROKER_PROBE_MS, { groups: false })) === true) {
      logger.info({ port }, 'a Kafka broker we did not start answers on the port: using it, `down` will leave it running');
      return { brokers, started: false, owned: false };
    }
    throw new Error(`port ${port} is in use by a process that does not answer as a Kafka broker; free it or choose another port`);
  }
  if (await isPortOpen(controllerPort)) {
    throw new Error(`Kafka controller port ${controllerPort} is already in use; free it or choose another port`);
  }
  const pid = await startBroker(opts, paths, brokers);
  return { brokers, pid, started: true, owned: true };
}

/** Stops the broker started from this state dir, if it runs; returns whether there was one. */
export async function stopBroker(stateDir: string, logger: Logger): Promise<boolean> {
  const paths = brokerPaths(stateDir);
  const own = await inspectPidFile(paths.pidFile, brokerMarkers(paths));
  if (own.state === 'running') {
    const t0 = Date.now();
    const how = await terminate(own.pid, STOP_GRACE_MS);
    logger.info({ pid: own.pid, how, durationMs: Date.now() - t0 }, 'Kafka broker stopped');
  }
  await rm(paths.pidFile, { force: true });
  return own.state === 'running';
}
