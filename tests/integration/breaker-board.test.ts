import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import type { RedisClient } from '../../src/redis/client.js';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { BreakerBoard, type BreakerBoardOptions } from '../../src/breakers/breaker-board.js';
import type { BreakerView } from '../../src/breakers/breaker-gate.js';
import { BreakerStore, type BreakerPolicy } from '../../src/breakers/breaker-store.js';
import { createMetrics, type Metrics } from '../../src/obs/metrics.js';
import { redisKeys, type RedisKeys } from '../../src/redis/keys.js';
import { LuaScripts } from '../../src/redis/scripts.js';
import { eventually, testNamespace } from './harness.js';
import { connectPair, deleteMatching, REDIS_BACKENDS, redisNowMs, shardChannelSubscribers } from './lua/redis-clients.js';

/**
 * BreakerBoard against a real Redis: two boards on separate connections stand in for two
 * processor instances. Every test gets its own key namespace, so no test sees another's breakers
 * or announcements.
 */
const base = testNamespace('breaker-board');
const DEPS = ['llm', 'tool', 'search'];
/** Long enough that no poll happens during a test that is about announcements. */
const NO_POLL = 600_000;
/** How fast an announcement must reach every board; pub/sub on localhost takes ~1 ms, the rest is a busy machine. */
const ANNOUNCE_MS = 250;
let a: RedisClient;
let b: RedisClient;
let n = 0;
let open: BreakerBoard[] = [];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(REDIS_BACKENDS)('on %s', (backend) => {
  beforeAll(async () => ([a, b] = await connectPair(backend)));
  afterEach(async () => {
    await Promise.all(open.map((board) => board.close()));
    open = [];
  });
  afterAll(async () => {
    if (!a || !b) return;
    await deleteMatching(a, `${base}*`);
    await Promise.all([a.quit(), b.quit()]);
  });

  const freshKeys = (): RedisKeys => redisKeys(`${base}${++n}.`);

  interface Seen {
    next: BreakerView;
    previous: BreakerView;
    at: number;
  }

  /** A board with its changes, log lines and metrics recorded; `start()` is left to the test. */
  function makeBoard(redis: RedisClient, keys: RedisKeys, opts: Partial<BreakerBoardOptions> = {}) {
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    const metrics = createMetrics();
    const board = new BreakerBoard(redis, keys, { dependencies: DEPS, pollMs: NO_POLL, logger, metrics, ...opts });
    open.push(board);
    const changes: Seen[] = [];
    board.onChange((next, previous) => changes.push({ next, previous, at: performance.now() }));
    return { board, changes, lines, metrics, seen: () => lines.filter((l) => l.msg === 'breaker state seen') };
  }

  async function gauge(metrics: Metrics, dependency: string): Promise<number | undefined> {
    return (await metrics.breakerState.get()).values.find((v) => v.labels.dependency === dependency)?.value;
  }

  const transition = (dependency: string, from: string, to: string, retryAt: number | null) => JSON.stringify({ dependency, from, to, at: Date.now(), retryAt });

  describe('BreakerBoard: announcements', () => {
    it('two boards on separate connections both see a published transition within ~250 ms, once each', async () => {
      const keys = freshKeys();
      const A = makeBoard(a, keys);
      const B = makeBoard(b, keys);
      await Promise.all([A.board.start(), B.board.start()]);
      const retryAt = Date.now() + 30_000;
      // As the scripts do: the hash first, then the announcement.
      await a.hset(keys.breaker('llm'), 'state', 'open', 'retryAt', String(retryAt));
      const sent = performance.now();
      await a.spublish(keys.breakerChanged('llm'), transition('llm', 'closed', 'open', retryAt));
      await eventually(async () => (A.changes.length > 0 && B.changes.length > 0 ? true : undefined), 5_000, 'both boards to see the transition', 5);
      for (const [name, x] of [['A', A], ['B', B]] as const) {
        expect(x.changes[0]!.at - sent, `board ${name} latency`).toBeLessThan(ANNOUNCE_MS);
        expect(x.changes[0]!.next).toEqual({ name: 'llm', state: 'open', retryAt });
        expect(x.changes[0]!.previous).toEqual({ name: 'llm', state: 'closed' });
        expect(x.board.view('llm')).toEqual({ name: 'llm', state: 'open', retryAt });
        expect(x.seen()).toEqual([expect.objectContaining({ component: 'breaker-board', dependency: 'llm', from: 'closed', to: 'open', retryAt, source: 'announcement' })]);
      }
      // A read that agrees with the announcement is no second change.
      await Promise.all([A.board.refresh(), B.board.refresh()]);
      await sleep(100);
      expect(A.changes).toHaveLength(1);
      expect(B.changes).toHaveLength(1);
      expect(A.board.view('tool')).toEqual({ name: 'tool', state: 'closed' });
    });

    it('ignores malformed announcements and announcements of dependencies it does not track', async () => {
      const keys = freshKeys();
      const A = makeBoard(a, keys);
      await A.board.start();
      const soon = Date.now() + 10_000;
      const bad = [
        'not json',
        '',
        'null',
        '42',
        '"open"',
        '[]',
        '{}',
        JSON.stringify({ dependency: 'llm', from: 'closed', to: 'open', at: Date.now() }), // open without retryAt
        JSON.stringify({ dependency: 'llm', from: 'closed', to: 'open', at: Date.now(), retryAt: null }),
        JSON.stringify({ dependency: 'llm', from: 'closed', to: 'open', at: Date.now(), retryAt: String(soon) }),
        JSON.stringify({ dependency: 'llm', from: 'closed', to: 'open', at: Date.now(), retryAt: -5 }),
        JSON.stringify({ dependency: 'llm', from: 'open', to: 'half_open', at: Date.now(), retryAt: soon }), // retryAt only with open
        JSON.stringify({ dependency: 'llm', from: 'open', to: 'open', at: Date.now(), retryAt: soon }),
        JSON.stringify({ dependency: 'llm', from: 'closed', to: 'OPEN', at: Date.now(), retryAt: soon }),
        JSON.stringify({ dependency: 'llm', from: 'closed', to: 'tripped', at: Date.now(), retryAt: soon }),
        JSON.stringify({ dependency: 'llm', from: 'closed', to: 'open', at: -1, retryAt: soon }),
        JSON.stringify({ dependency: 'llm', from: 'closed', to: 'open', at: 'now', retryAt: soon }),
        JSON.stringify({ dependency: '', from: 'closed', to: 'open', at: Date.now(), retryAt: soon }),
        JSON.stringify({ dependency: 7, from: 'closed', to: 'open', at: Date.now(), retryAt: soon }),
        transition('not-tracked', 'closed', 'open', soon),
      ];
      for (const payload of bad) await a.spublish(keys.breakerChanged('tool'), payload);
      // Messages on one channel arrive in order: once this one is seen, every bad one was handled.
      await a.spublish(keys.breakerChanged('tool'), transition('tool', 'closed', 'open', soon));
      await eventually(async () => (A.changes.length > 0 ? true : undefined), 5_000, 'the valid announcement', 5);
      await sleep(50);
      expect(A.changes.map((c) => c.next)).toEqual([{ name: 'tool', state: 'open', retryAt: soon }]);
      expect(A.board.view('llm')).toEqual({ name: 'llm', state: 'closed' });
      expect([...A.board.all().keys()].sort()).toEqual([...DEPS].sort());
      expect(await gauge(A.metrics, 'llm')).toBe(0);
    });

    it('ignores announcements on another namespace’s channel', async () => {
      const keys = freshKeys();
      const other = freshKeys();
      const A = makeBoard(a, keys);
      const O = makeBoard(b, other);
      await Promise.all([A.board.start(), O.board.start()]);
      await a.spublish(keys.breakerChanged('llm'), transition('llm', 'closed', 'half_open', null));
      await eventually(async () => (A.changes.length > 0 ? true : undefined), 5_000, 'the announcement', 5);
      await sleep(100);
      expect(O.changes).toEqual([]);
      expect(O.board.view('llm').state).toBe('closed');
    });
  });

  describe('BreakerBoard: reading the shared state', () => {
    it('a board started after breakers changed reads them at start', async () => {
      const keys = freshKeys();
      const retryAt = Date.now() + 60_000;
      await a.hset(keys.breaker('llm'), 'state', 'open', 'retryAt', String(retryAt));
      await a.hset(keys.breaker('tool'), 'state', 'half_open', 'probeSuccesses', '1');
      const A = makeBoard(b, keys);
      await A.board.start();
      expect(A.board.view('llm')).toEqual({ name: 'llm', state: 'open', retryAt });
      expect(A.board.view('tool')).toEqual({ name: 'tool', state: 'half_open' });
      expect(A.board.view('search')).toEqual({ name: 'search', state: 'closed' });
      expect(await gauge(A.metrics, 'llm')).toBe(2);
      expect(await gauge(A.metrics, 'tool')).toBe(1);
      expect(await gauge(A.metrics, 'search')).toBe(0);
      expect(A.changes.map((c) => c.next.name).sort()).toEqual(['llm', 'tool']);
      expect(A.seen().every((l) => l.source === 'read')).toBe(true);
    });

    it('a missed announcement (the hash changed, nothing published) is picked up by the poll within pollMs', async () => {
      const pollMs = 200;
      const keys = freshKeys();
      const A = makeBoard(a, keys, { pollMs });
      await A.board.start();
      const retryAt = Date.now() + 60_000;
      const written = performance.now();
      await b.hset(keys.breaker('search'), 'state', 'open', 'retryAt', String(retryAt));
      await eventually(async () => (A.changes.length > 0 ? true : undefined), pollMs + 3_000, 'the poll to see the open breaker', 5);
      // One poll period, plus a generous margin for a busy machine.
      expect(A.changes[0]!.at - written).toBeLessThan(pollMs + 750);
      expect(A.board.view('search')).toEqual({ name: 'search', state: 'open', retryAt });
      expect(A.seen()).toEqual([expect.objectContaining({ dependency: 'search', to: 'open', source: 'read' })]);
      // The hash expiring (or being deleted) is a closed breaker.
      await b.del(keys.breaker('search'));
      await eventually(async () => (A.board.view('search').state === 'closed' ? true : undefined), pollMs + 3_000, 'the poll to see it closed', 5);
      await sleep(2 * pollMs);
      expect(A.changes.map((c) => c.next.state)).toEqual(['open', 'closed']);
    });

    it('drops a read that started no later than the last announcement of that dependency', async () => {
      const keys = freshKeys();
      let now = 1_000;
      const A = makeBoard(a, keys, { now: () => now });
      await A.board.start();
      // Announced but (as if) not yet written: a read of the same moment must not undo it.
      await a.spublish(keys.breakerChanged('llm'), transition('llm', 'closed', 'half_open', null));
      await a.spublish(keys.breakerChanged('tool'), transition('tool', 'closed', 'half_open', null));
      await eventually(async () => (A.changes.length === 2 ? true : undefined), 5_000, 'the announcements', 5);
      await a.hset(keys.breaker('search'), 'state', 'half_open');
      await A.board.refresh();
      expect(A.board.view('llm').state).toBe('half_open');
      expect(A.board.view('tool').state).toBe('half_open');
      // Only the announced dependencies are protected; the others are read as usual.
      expect(A.board.view('search').state).toBe('half_open');
      now++;
      await A.board.refresh();
      expect(A.board.view('llm').state).toBe('closed');
      expect(A.board.view('tool').state).toBe('closed');
    });
  });

  describe('BreakerBoard: metrics and lifecycle', () => {
    it('sluice_breaker_state follows the state: 0 closed, 1 half-open, 2 open', async () => {
      const keys = freshKeys();
      const A = makeBoard(a, keys);
      expect(await gauge(A.metrics, 'llm')).toBe(0); // known before start: every dependency starts closed
      await A.board.start();
      const steps: [string, string, number | null, number][] = [
        ['closed', 'open', Date.now() + 5_000, 2],
        ['open', 'half_open', null, 1],
        ['half_open', 'open', Date.now() + 9_000, 2],
        ['open', 'half_open', null, 1],
        ['half_open', 'closed', null, 0],
      ];
      for (const [i, [from, to, retryAt, value]] of steps.entries()) {
        await a.spublish(keys.breakerChanged('llm'), transition('llm', from, to, retryAt));
        await eventually(async () => (A.changes.length === i + 1 ? true : undefined), 5_000, `${from} → ${to}`, 5);
        expect(await gauge(A.metrics, 'llm'), `${from} → ${to}`).toBe(value);
      }
      expect(await gauge(A.metrics, 'tool')).toBe(0);
      const text = await A.metrics.registry.getSingleMetricAsString('sluice_breaker_state');
      expect(text).toContain('sluice_breaker_state{dependency="llm"} 0');
    });

    // Killing the subscriber's connection by id needs the one server it is on: single node only.
    it.runIf(backend === 'single-node')('is live once subscribed and read, not while its subscription reconnects, and live again after catching up', async () => {
      const keys = freshKeys();
      // Named, so its duplicate (the subscriber) can be told apart from other users of the server.
      const own = new Redis(inject('infra').redisUrl, { connectionName: `board-${n}`, maxRetriesPerRequest: 1, connectTimeout: 5_000, commandTimeout: 5_000 });
      try {
        const A = makeBoard(own, keys);
        expect(A.board.live()).toBe(false);
        await A.board.start();
        expect(A.board.live()).toBe(true);
        // The hash changes while the subscription is down: that announcement is lost.
        const list = String(await own.client('LIST'));
        const subscriber = list.split('\n').find((l) => l.includes(` name=board-${n} `) && / ssub=[1-9]/.test(l));
        const id = /(?:^|\s)id=(\d+)/.exec(subscriber ?? '')?.[1];
        expect(id).toBeDefined();
        await own.client('KILL', 'ID', id!);
        await eventually(async () => (A.board.live() ? undefined : true), 5_000, 'the board to stop being live', 5);
        await own.hset(keys.breaker('llm'), 'state', 'open', 'retryAt', String(Date.now() + 60_000));
        await eventually(async () => (A.board.live() ? true : undefined), 10_000, 'the board to be live again', 10);
        // Live again means read again: the missed change is in the view.
        expect(A.board.view('llm').state).toBe('open');
      } finally {
        await Promise.all(open.map((x) => x.close()));
        open = [];
        await own.quit();
      }
    });

    it('close() unsubscribes, stops polling and leaves no connection open', async () => {
      const keys = freshKeys();
      const sockets = () => process.getActiveResourcesInfo().filter((r) => r === 'TCPSocketWrap').length;
      const numsub = () => Promise.all(DEPS.map((d) => shardChannelSubscribers(a, keys.breakerChanged(d))));
      // On a cluster, asking every master opens the test client's own connections to those it has
      // not used yet: open them before counting, so only the board's connections are counted.
      expect(await numsub()).toEqual(DEPS.map(() => 0));
      // quit() resolves on Redis' OK, before the socket is gone: earlier tests' subscribers may still be closing.
      let before = sockets();
      for (let steady = 0; steady < 3; ) {
        await sleep(50);
        const now = sockets();
        steady = now === before ? steady + 1 : 0;
        before = now;
      }
      const A = makeBoard(a, keys, { pollMs: 50 });
      await A.board.start();
      // One connection on a single server; on a cluster, one per master and a sharded subscriber per master.
      if (backend === 'single-node') expect(sockets()).toBe(before + 1);
      else expect(sockets()).toBeGreaterThan(before);
      expect(await numsub()).toEqual(DEPS.map(() => 1));
      await A.board.close();
      open = open.filter((x) => x !== A.board);
      await eventually(async () => ((await numsub()).every((n) => n === 0) && sockets() === before ? true : undefined), 5_000, 'the subscriber to go away', 10);
      await a.hset(keys.breaker('llm'), 'state', 'open', 'retryAt', String(Date.now() + 60_000));
      await a.spublish(keys.breakerChanged('tool'), transition('tool', 'closed', 'half_open', null));
      await sleep(300);
      expect(A.changes).toEqual([]);
      expect(A.board.view('llm').state).toBe('closed');
      expect(A.board.view('tool').state).toBe('closed');
      // Closing twice is harmless (shutdown paths may overlap).
      await A.board.close();
    });
  });

  describe('BreakerBoard with the breaker scripts', () => {
    /** Trips on the third failure and lets probes through soon after. */
    const POLICY: BreakerPolicy = {
      windowMs: 60_000,
      minimumCalls: 3,
      failureThreshold: 3,
      failureRateThreshold: 1,
      slowCallMs: 60_000,
      slowCallRateThreshold: 1,
      openMs: 300,
      halfOpenProbes: 2,
      halfOpenSuccesses: 2,
      probeLeaseMs: 60_000,
    };

    it('both boards follow real transitions: open (same retryAt), half-open, open again, closed', async () => {
      const keys = freshKeys();
      const store = new BreakerStore(new LuaScripts(a), keys, (d) => (DEPS.includes(d) ? POLICY : undefined));
      const A = makeBoard(a, keys);
      const B = makeBoard(b, keys);
      await Promise.all([A.board.start(), B.board.start()]);
      const both = (what: string, check: (v: BreakerView) => boolean) =>
        eventually(async () => (check(A.board.view('llm')) && check(B.board.view('llm')) ? true : undefined), 5_000, what, 5);
      const retryAtInRedis = async () => Number((await a.hget(keys.breaker('llm'), 'retryAt')) ?? Number.NaN);

      expect(await store.record('llm', undefined, 'failure', 5)).toEqual({ state: 'closed', changed: false });
      expect(await store.record('llm', undefined, 'failure', 5)).toEqual({ state: 'closed', changed: false });
      await sleep(100);
      expect(A.changes).toEqual([]);
      expect(await store.record('llm', undefined, 'failure', 5)).toEqual({ state: 'open', changed: true });
      const retryAt = await retryAtInRedis();
      expect(Number.isFinite(retryAt)).toBe(true);
      await both('both to see open', (v) => v.state === 'open');
      expect(A.board.view('llm')).toEqual({ name: 'llm', state: 'open', retryAt });
      expect(B.board.view('llm')).toEqual({ name: 'llm', state: 'open', retryAt });
      expect(await gauge(A.metrics, 'llm')).toBe(2);
      expect(await gauge(B.metrics, 'llm')).toBe(2);

      await eventually(async () => ((await redisNowMs(a)) >= retryAt ? true : undefined), 5_000, 'retryAt in Redis time', 10);
      expect(await store.admit('llm', 'probe-1')).toEqual({ allowed: true, probe: true });
      await both('both to see half-open', (v) => v.state === 'half_open');
      expect(A.board.view('llm')).toEqual({ name: 'llm', state: 'half_open' });
      expect(await gauge(B.metrics, 'llm')).toBe(1);

      expect(await store.record('llm', 'probe-1', 'failure', 5)).toEqual({ state: 'open', changed: true });
      const retryAt2 = await retryAtInRedis();
      expect(retryAt2).toBeGreaterThan(retryAt);
      await both('both to see open again', (v) => v.state === 'open' && v.retryAt === retryAt2);

      await eventually(async () => ((await redisNowMs(a)) >= retryAt2 ? true : undefined), 5_000, 'the second retryAt', 10);
      expect(await store.admit('llm', 'probe-2')).toEqual({ allowed: true, probe: true });
      expect(await store.admit('llm', 'probe-3')).toEqual({ allowed: true, probe: true });
      expect((await store.admit('llm', 'probe-4')).allowed).toBe(false);
      expect(await store.record('llm', 'probe-2', 'success', 5)).toEqual({ state: 'half_open', changed: false });
      expect(await store.record('llm', 'probe-3', 'success', 5)).toEqual({ state: 'closed', changed: true });
      await both('both to see closed', (v) => v.state === 'closed');
      expect(await gauge(A.metrics, 'llm')).toBe(0);
      expect(await gauge(B.metrics, 'llm')).toBe(0);

      await sleep(100);
      // Each transition once, in order, on both boards; the others were never touched.
      for (const x of [A, B]) {
        expect(x.changes.map((c) => [c.previous.state, c.next.state])).toEqual([
          ['closed', 'open'],
          ['open', 'half_open'],
          ['half_open', 'open'],
          ['open', 'half_open'],
          ['half_open', 'closed'],
        ]);
        expect(x.changes.map((c) => c.next.retryAt)).toEqual([retryAt, undefined, retryAt2, undefined, undefined]);
        expect(x.seen().every((l) => l.source === 'announcement')).toBe(true);
        expect(x.board.view('tool').state).toBe('closed');
      }
    });

    it('both boards follow an operator force at once, keep the shared state under it, and see it end by itself at the next read', async () => {
      const keys = freshKeys();
      const store = new BreakerStore(new LuaScripts(a), keys, (d) => (DEPS.includes(d) ? POLICY : undefined));
      const A = makeBoard(a, keys);
      const B = makeBoard(b, keys, { pollMs: 200 });
      await Promise.all([A.board.start(), B.board.start()]);
      const both = (what: string, check: (v: BreakerView) => boolean) =>
        eventually(async () => (check(A.board.view('llm')) && check(B.board.view('llm')) ? true : undefined), 5_000, what, 5);

      const forcedOpen = await store.force('llm', 'open', 60_000);
      await both('both to see it forced open', (v) => v.forced?.mode === 'open');
      expect(A.board.view('llm')).toEqual({ name: 'llm', state: 'open', retryAt: forcedOpen.until, forced: forcedOpen });
      expect(await gauge(A.metrics, 'llm')).toBe(2);

      // Failures past the thresholds under the force move nothing: no transition reaches the boards.
      for (let i = 0; i < 3; i++) expect(await store.record('llm', undefined, 'failure', 5)).toEqual({ state: 'closed', changed: false });
      await sleep(100);
      expect(A.changes).toHaveLength(1);

      const forcedClosed = await store.force('llm', 'closed', 400);
      await both('both to see it forced closed', (v) => v.state === 'closed' && v.forced?.mode === 'closed');
      expect(A.board.all().get('llm')).toEqual({ name: 'llm', state: 'closed', forced: forcedClosed });
      // No message marks the end: the view drops the force at its end, and B's read confirms the state beneath.
      await both('both to see the force over', (v) => v.forced === undefined);
      await eventually(async () => (B.seen().some((l) => l.source === 'read' && l.forced === null) ? true : undefined), 5_000, "B's read to show the force gone", 10);
      expect(await store.force('llm', 'open', 60_000)).toMatchObject({ mode: 'open' });
      await both('both to see it forced open again', (v) => v.forced?.mode === 'open');
      expect(await store.clearForce('llm')).toBe(true);
      await both('both to see the clear', (v) => v.forced === undefined);
      expect(A.changes.map((c) => [c.previous.state, c.next.state, c.next.forced?.mode ?? null])).toEqual([
        ['closed', 'open', 'open'],
        ['open', 'closed', 'closed'],
        ['closed', 'open', 'open'],
        ['open', 'closed', null],
      ]);
    });
  });
});
