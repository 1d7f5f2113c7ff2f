import { createServer, type Server, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { KafkaJSConnectionError, KafkaJSNonRetriableError, KafkaJSNumberOfRetriesExceeded, KafkaJSProtocolError, KafkaJSRequestTimeoutError } from 'kafkajs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProduceQueueFullError, ProduceTimeoutError } from '../../../src/producers/produce-batcher.js';
import { freePort } from '../../../src/util/free-port.js';
import { infrastructureFailure } from '../../../src/util/infrastructure-failure.js';
import { TimeoutError } from '../../../src/util/with-timeout.js';

const pgError = (code: string, message = 'server error') => Object.assign(new pg.DatabaseError(message, 0, 'error'), { severity: 'ERROR', code });
const withCode = (code: string) => Object.assign(new Error(`connect ${code} 127.0.0.1:1`), { code });

describe('infrastructureFailure: Redis', () => {
  it.each([
    ['ioredis giving up on a request', Object.assign(new Error('Reached the max retries per request limit (which is 1).'), { name: 'MaxRetriesPerRequestError' }), 'max_retries'],
    ['a command timeout', new Error('Command timed out'), 'timeout'],
    ['a closed connection', new Error('Connection is closed.'), 'connection'],
    ['no offline queue', new Error("Stream isn't writeable and enableOfflineQueue options is false"), 'connection'],
    ['no cluster node answering', new Error('None of startup nodes is available'), 'connection'],
    ['no cluster slots', Object.assign(new Error('Failed to refresh slots cache.'), { name: 'ClusterAllFailedError' }), 'connection'],
    ['a cluster not ready', new Error("Cluster isn't ready and enableOfflineQueue options is false"), 'connection'],
    ['a cluster moving slots around', new Error('Too many Cluster redirections. Last error: Error: Connection is closed.'), 'connection'],
    ['a socket timeout', new Error("Socket timeout. Expecting data, but didn't receive any in 1000ms."), 'connection'],
  ])('%s', (_label, err, reason) => {
    expect(infrastructureFailure(err)).toEqual({ dependency: 'redis', reason });
  });

  it('server replies meaning "not now" are outages; a wrong command is a bug', () => {
    const reply = (message: string) => Object.assign(new Error(message), { name: 'ReplyError' });
    for (const m of ['LOADING Redis is loading the dataset in memory', 'BUSY Redis is busy running a script', 'MASTERDOWN Link with MASTER is down', 'READONLY You can\'t write against a read only replica.', 'CLUSTERDOWN The cluster is down', 'TRYAGAIN Multiple keys request during rehashing of slot', 'OOM command not allowed when used memory > \'maxmemory\'', 'NOREPLICAS Not enough good replicas to write.', 'MISCONF Redis is configured to save RDB snapshots']) {
      expect(infrastructureFailure(reply(m)), m).toEqual({ dependency: 'redis', reason: 'server_unavailable' });
    }
    for (const m of ['ERR wrong number of arguments for \'evalsha\' command', 'WRONGTYPE Operation against a key holding the wrong kind of value', 'NOSCRIPT No matching script', 'ERR Error running script: attempt to compare nil with number', 'LOADINGX not a real prefix']) {
      expect(infrastructureFailure(reply(m)), m).toBeUndefined();
    }
  });
});

describe('infrastructureFailure: Postgres', () => {
  it('SQLSTATE classes of an unavailable server: 08, 53, 57P, 58 and 57014 (statement timeout)', () => {
    for (const code of ['08000', '08003', '08006', '08001', '08004', '53000', '53100', '53200', '53300', '57P01', '57P02', '57P03', '57014', '58000', '58030']) {
      expect(infrastructureFailure(pgError(code)), code).toEqual({ dependency: 'postgres', reason: `sqlstate_${code.slice(0, 2)}` });
    }
  });

  it('data, constraint and syntax errors are not outages', () => {
    for (const code of ['22P05', '22001', '23505', '23503', '42601', '42P01', '25P02', 'XX000']) {
      expect(infrastructureFailure(pgError(code)), code).toBeUndefined();
    }
  });

  it('a serialization failure, a deadlock, a lock or idle-session timeout pass: retrying later helps', () => {
    for (const code of ['40001', '40P01', '57000', '55P03', '25P03']) {
      expect(infrastructureFailure(pgError(code)), code).toMatchObject({ dependency: 'postgres' });
    }
  });

  it.each([
    ['Connection terminated unexpectedly'],
    ['Connection terminated due to connection timeout'],
    ['timeout exceeded when trying to connect'],
    ['Query read timeout'],
    ['Client has encountered a connection error and is not queryable'],
  ])('the client losing its connection: %s', (message) => {
    expect(infrastructureFailure(new Error(message))).toEqual({ dependency: 'postgres', reason: 'connection' });
  });
});

describe('infrastructureFailure: Kafka and our producer', () => {
  it('kafkajs connection, timeout and retriable protocol errors are outages', () => {
    expect(infrastructureFailure(new KafkaJSConnectionError('Connection error: connect ECONNREFUSED'))).toEqual({ dependency: 'kafka', reason: 'unavailable' });
    expect(infrastructureFailure(new KafkaJSRequestTimeoutError('Request Produce(key: 0, version: 7) timed out'))).toEqual({ dependency: 'kafka', reason: 'unavailable' });
    expect(infrastructureFailure(new KafkaJSProtocolError(Object.assign(new Error('This server is not the leader for that topic-partition'), { type: 'NOT_LEADER_FOR_PARTITION', code: 6, retriable: true })))).toEqual({ dependency: 'kafka', reason: 'unavailable' });
    expect(infrastructureFailure(new KafkaJSNumberOfRetriesExceeded(new Error('gave up'), { retryCount: 5, retryTime: 1000 }))).toEqual({ dependency: 'kafka', reason: 'unavailable' });
  });

  it('non-retriable kafkajs errors (a record too large, a bad request) are not outages', () => {
    expect(infrastructureFailure(new KafkaJSProtocolError(Object.assign(new Error('The request included a message larger than the max message size'), { type: 'MESSAGE_TOO_LARGE', code: 10, retriable: false })))).toBeUndefined();
    expect(infrastructureFailure(new KafkaJSNonRetriableError('Invalid partition'))).toBeUndefined();
  });

  it('our producer not getting acknowledgements', () => {
    expect(infrastructureFailure(new ProduceTimeoutError(5_000, true))).toEqual({ dependency: 'kafka', reason: 'not_acknowledged' });
    expect(infrastructureFailure(new ProduceQueueFullError(10_000))).toEqual({ dependency: 'kafka', reason: 'not_acknowledged' });
  });
});

describe('infrastructureFailure: network, timeouts, causes and bugs', () => {
  it('socket errors of any client', () => {
    for (const code of ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE', 'EAI_AGAIN', 'ENOTFOUND']) {
      expect(infrastructureFailure(withCode(code)), code).toEqual({ dependency: 'network', reason: code.toLowerCase() });
    }
    expect(infrastructureFailure(withCode('ENOENT'))).toBeUndefined();
    expect(infrastructureFailure(withCode('ERR_INVALID_ARG_TYPE'))).toBeUndefined();
  });

  it('our own timeouts and fetch timeouts', () => {
    expect(infrastructureFailure(new TimeoutError('recording the admission timed out after 1000 ms'))).toEqual({ dependency: 'timeout', reason: 'timeout' });
    expect(infrastructureFailure(new DOMException('The operation was aborted due to timeout', 'TimeoutError'))).toEqual({ dependency: 'timeout', reason: 'timeout' });
  });

  it('looks through causes and AggregateError members', () => {
    expect(infrastructureFailure(new Error('could not admit', { cause: new Error('Command timed out') }))).toEqual({ dependency: 'redis', reason: 'timeout' });
    expect(infrastructureFailure(new AggregateError([new Error('first'), withCode('ECONNREFUSED')], 'connect failed'))).toEqual({ dependency: 'network', reason: 'econnrefused' });
  });

  it('survives cyclic and endless cause chains', () => {
    const a = new Error('a');
    const b = new Error('b', { cause: a });
    Object.assign(a, { cause: b });
    expect(infrastructureFailure(a)).toBeUndefined();
    let chain: Error = withCode('ECONNREFUSED');
    for (let i = 0; i < 100; i++) chain = new Error(`wrap ${i}`, { cause: chain });
    expect(infrastructureFailure(chain)).toBeUndefined();
  });

  it('bugs and odd values are not infrastructure failures', () => {
    for (const err of [new TypeError("Cannot read properties of undefined (reading 'x')"), new RangeError('Maximum call stack size exceeded'), new Error('anything else'), undefined, null, 'Command timed out', 42, {}, { message: 7, code: ['ECONNREFUSED'] }]) {
      expect(infrastructureFailure(err), String(err)).toBeUndefined();
    }
  });
});

describe('infrastructureFailure on errors real clients raise', () => {
  let port: number;
  let silent: Server;
  const sockets = new Set<Socket>();

  beforeAll(async () => {
    port = await freePort();
    // A server that accepts and never answers: a Redis that hangs.
    silent = createServer((s) => void sockets.add(s));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  });
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => silent.close(r));
  });

  it('ioredis against a closed port, configured as Sluice configures it', async () => {
    const redis = new Redis(`redis://127.0.0.1:${port}`, { lazyConnect: true, connectTimeout: 500, maxRetriesPerRequest: 1, commandTimeout: 500, retryStrategy: () => 50 });
    redis.on('error', () => undefined);
    try {
      const err = await redis.ping().then(() => undefined, (e: unknown) => e);
      expect(infrastructureFailure(err)).toMatchObject({ dependency: 'redis' });
    } finally {
      redis.disconnect();
    }
  });

  it('ioredis against a server that never answers', async () => {
    const addr = silent.address();
    const redis = new Redis(`redis://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}`, { lazyConnect: true, connectTimeout: 500, maxRetriesPerRequest: 1, commandTimeout: 300 });
    redis.on('error', () => undefined);
    try {
      const err = await redis.ping().then(() => undefined, (e: unknown) => e);
      expect(infrastructureFailure(err)).toMatchObject({ dependency: 'redis' });
    } finally {
      redis.disconnect();
    }
  });

  it('a pg pool against a closed port', async () => {
    const pool = new pg.Pool({ connectionString: `postgresql://postgres@127.0.0.1:${port}/x`, connectionTimeoutMillis: 500 });
    try {
      const err = await pool.query('SELECT 1').then(() => undefined, (e: unknown) => e);
      expect(infrastructureFailure(err)).toBeDefined();
    } finally {
      await pool.end();
    }
  });
});
