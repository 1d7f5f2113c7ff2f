import type { RedisClient } from '../redis/client.js';
import { ShardedSubscriber } from '../redis/sharded-subscriber.js';
import type { Logger } from '../obs/logger.js';
import type { Metrics } from '../obs/metrics.js';
import type { RedisKeys } from '../redis/keys.js';
import { numberField } from '../redis/number-field.js';
import { BREAKER_STATE_VALUE, effectiveView, type BreakerForce, type BreakerView } from './breaker-gate.js';
import { parseBreakerForceChange, parseBreakerTransition } from './breaker-store.js';

export type BreakerListener = (next: BreakerView, previous: BreakerView) => void;

export interface BreakerBoardOptions {
  dependencies: readonly string[];
  /** How often the shared state is read even without announcements (a missed message heals by then). */
  pollMs: number;
  logger: Logger;
  metrics?: Metrics;
  now?: () => number;
}

/** A forced hash as breaker-force.lua writes it (`mode`, `until`), or undefined when none (or unreadable). */
export function parseForcedHash(hash: Record<string, string>): BreakerForce | undefined {
  const until = numberField(hash.until);
  return (hash.mode === 'open' || hash.mode === 'closed') && until !== undefined ? { mode: hash.mode, until } : undefined;
}

/**
 * A breaker hash as the breaker scripts write it: `state`, while open `retryAt` and, once closed
 * after a trip, `closedAt` (ms); with the forced hash beside it. A missing hash is a closed
 * breaker; each time means something only in its state, so it is kept only then.
 */
export function parseBreakerHash(name: string, hash: Record<string, string>, forcedHash: Record<string, string> = {}): BreakerView {
  const state = hash.state === 'open' || hash.state === 'half_open' ? hash.state : 'closed';
  const retryAt = state === 'open' ? numberField(hash.retryAt) : undefined;
  const closedAt = state === 'closed' ? numberField(hash.closedAt) : undefined;
  const forced = parseForcedHash(forcedHash);
  return { name, state, ...(retryAt !== undefined ? { retryAt } : {}), ...(closedAt !== undefined ? { closedAt } : {}), ...(forced ? { forced } : {}) };
}

const sameView = (a: BreakerView, b: BreakerView) =>
  a.state === b.state && a.retryAt === b.retryAt && a.closedAt === b.closedAt && a.forced?.mode === b.forced?.mode && a.forced?.until === b.forced?.until;

/**
 * Every instance's view of the shared breakers. Transitions and operators' forces arrive by Redis
 * pub/sub within milliseconds; the state hashes are also read every `pollMs`, so an instance that
 * missed a message (it was reconnecting, or a force expired, which sends none) converges anyway.
 * A read that started before the last announcement of a dependency is older than what it would
 * overwrite, so it is dropped for that dependency. `view` and `all` answer the breakers as calls
 * meet them: a force in place decides (`effectiveView`), and one past its end is dropped at once.
 */
export class BreakerBoard {
  private readonly views = new Map<string, BreakerView>();
  private readonly announcedAt = new Map<string, number>();
  private readonly listeners = new Set<BreakerListener>();
  private readonly subscriber: ShardedSubscriber;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly known: Set<string>;
  private timer: NodeJS.Timeout | undefined;
  /** Subscribed, and every state read since (re)connecting: the view changes as soon as the shared state does. */
  private following = false;
  /** One read at a time: two overlapping reads could land out of order and restore an older state. */
  private reading: Promise<void> | undefined;
  private closed = false;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: RedisKeys,
    private readonly opts: BreakerBoardOptions,
  ) {
    this.log = opts.logger.child({ component: 'breaker-board' });
    this.now = opts.now ?? Date.now;
    this.known = new Set(opts.dependencies);
    for (const d of opts.dependencies) {
      this.views.set(d, { name: d, state: 'closed' });
      opts.metrics?.breakerState.set({ dependency: d }, BREAKER_STATE_VALUE.closed);
    }
    this.subscriber = new ShardedSubscriber(redis, opts.dependencies.map((d) => keys.breakerChanged(d)), {
      message: (payload) => this.onAnnouncement(payload),
      // Announcements sent while reconnecting are lost: the view lags until the read after 'ready'.
      ready: () => void this.catchUp(),
      lost: () => (this.following = false),
      error: (err) => this.log.warn({ err }, 'breaker subscriber error; falling back to reading the state every poll'),
    });
  }

  /** Resolves once subscribed and the current states are read; rejects if Redis cannot be reached or is older than 7. */
  async start(): Promise<void> {
    await this.subscriber.start();
    await this.refresh();
    this.following = this.subscriber.ready();
    this.timer = setInterval(() => void this.refreshQuietly(), this.opts.pollMs);
    this.timer.unref();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.following = false;
    clearInterval(this.timer);
    this.listeners.clear();
    await this.reading?.catch(() => undefined);
    await this.subscriber.close();
  }

  /**
   * Whether the view follows the shared state live: subscribed to the announcements, and read
   * since the subscription last (re)connected. Only then does a closed view stand for Redis's answer.
   */
  live(): boolean {
    return this.following;
  }

  all(): ReadonlyMap<string, BreakerView> {
    const now = this.now();
    return new Map([...this.views].map(([d, v]) => [d, effectiveView(v, now)]));
  }

  view(dependency: string): BreakerView {
    return effectiveView(this.shared(dependency), this.now());
  }

  /** The breaker as last read or announced, with its force whether in place or past. */
  private shared(dependency: string): BreakerView {
    return this.views.get(dependency) ?? { name: dependency, state: 'closed' };
  }

  /** Calls `listener` on every change of any breaker until the returned function is called. */
  onChange(listener: BreakerListener): () => void {
    const entry: BreakerListener = (n, p) => listener(n, p);
    this.listeners.add(entry);
    return () => void this.listeners.delete(entry);
  }

  /** Reads every breaker's state; a call while a read is in flight waits for that read instead. */
  refresh(): Promise<void> {
    this.reading ??= this.read().finally(() => (this.reading = undefined));
    return this.reading;
  }

  private async read(): Promise<void> {
    const names = [...this.known];
    const startedAt = this.now();
    // One read per breaker: each breaker's keys live in its dependency's slot, so no transaction spans them on a cluster.
    const views = await Promise.all(names.map((d) => this.readOne(d)));
    names.forEach((d, i) => {
      if ((this.announcedAt.get(d) ?? -1) >= startedAt) return;
      this.apply(views[i]!, 'read');
    });
  }

  /** The state and the force of one breaker, read together so neither is older than the other. */
  private async readOne(dependency: string): Promise<BreakerView> {
    const replies = await this.redis.multi().hgetall(this.keys.breaker(dependency)).hgetall(this.keys.breakerForced(dependency)).exec();
    const failed = replies?.find(([err]) => err);
    if (!replies || failed) throw failed?.[0] ?? new Error(`the read of breaker "${dependency}" was aborted`);
    return parseBreakerHash(dependency, replies[0]![1] as Record<string, string>, replies[1]![1] as Record<string, string>);
  }

  /** After (re)connecting: read every state, and follow live from then on. */
  private async catchUp(): Promise<void> {
    try {
      await this.refresh();
    } catch (err) {
      this.log.warn({ err }, 'could not read breaker states; keeping the last view');
      return;
    }
    if (!this.closed && this.subscriber.ready()) this.following = true;
  }

  private refreshQuietly(): Promise<void> {
    return this.refresh().catch((err: unknown) => this.log.warn({ err }, 'could not read breaker states; keeping the last view'));
  }

  /** A transition keeps the force in place; a force keeps the state: each announcement changes only its own. */
  private onAnnouncement(payload: string): void {
    const t = parseBreakerTransition(payload);
    const f = t ? undefined : parseBreakerForceChange(payload);
    const dependency = t?.dependency ?? f?.dependency;
    if (dependency === undefined || !this.known.has(dependency)) return;
    this.announcedAt.set(dependency, this.now());
    const { forced, ...current } = this.shared(dependency);
    if (t) {
      this.opts.metrics?.breakerTransitions.inc({ dependency, from: t.from, to: t.to });
      this.apply({ name: dependency, state: t.to, ...(t.retryAt !== null && t.to === 'open' ? { retryAt: t.retryAt } : {}), ...(t.to === 'closed' ? { closedAt: t.at } : {}), ...(forced ? { forced } : {}) }, 'announcement');
    } else if (f) {
      this.apply({ ...current, ...(f.forced !== null && f.until !== null ? { forced: { mode: f.forced, until: f.until } } : {}) }, 'announcement');
    }
  }

  private apply(shared: BreakerView, source: 'announcement' | 'read'): void {
    const before = this.shared(shared.name);
    if (this.closed || sameView(before, shared)) return;
    this.views.set(shared.name, shared);
    const now = this.now();
    const [next, previous] = [effectiveView(shared, now), effectiveView(before, now)];
    this.opts.metrics?.breakerState.set({ dependency: next.name }, BREAKER_STATE_VALUE[next.state]);
    // `seenAt` lets tests and operators compare when each instance learned of a transition.
    this.log.info({ dependency: next.name, from: previous.state, to: next.state, retryAt: next.retryAt ?? null, forced: shared.forced ?? null, source, seenAt: now }, 'breaker state seen');
    for (const listener of [...this.listeners]) {
      try {
        listener(next, previous);
      } catch (err) {
        this.log.error({ err }, 'a breaker listener threw');
      }
    }
  }
}
