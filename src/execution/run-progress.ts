import type { RunRequested } from '../events/schemas.js';
import type { RedisClient } from '../redis/client.js';
import type { Logger } from '../obs/logger.js';
import type { RedisKeys } from '../redis/keys.js';
import type { LuaScripts } from '../redis/scripts.js';
import { answerPendingMs, cancelReasonOf, type CancelReason } from '../runs/cancellation.js';
import { withTimeout } from '../util/with-timeout.js';

/** Where an attempt starts from: the outputs of the steps already completed, and the run's cancellation. */
export interface RunStart {
  done: ReadonlyMap<string, unknown>;
  cancelled: CancelReason | undefined;
}

/**
 * A run's progress as the processor keeps it across deliveries: its completed steps and, read with
 * them, its cancellation. At-least-once delivery means a run can be executed again after a crash
 * or rebalance; a step found done is not called again, so its side effect happens once (tools also
 * get an Idempotency-Key of runId:stepId, the second line of defence). Each step boundary is one
 * round trip: the step's output is recorded and the cancellation read for the next step together.
 */
export interface RunProgress {
  /**
   * At an attempt's start: the completed steps and the cancellation, in one round trip, once the
   * run's submission has its answer (a run answered 503 then reads as cancelled).
   */
  open(runId: string): Promise<RunStart>;
  /** Records a completed step; resolves to the cancellation the next step must respect. */
  record(runId: string, stepId: string, output: unknown, deadline: number): Promise<CancelReason | undefined>;
  /** A step boundary with nothing to record (the step was already done, or stood in for): the cancellation alone. */
  cancelReason(runId: string): Promise<CancelReason | undefined>;
  /** Adds an attempt's provider calls (per dependency) to the run's, as the run goes on to a next attempt. */
  addCalls(runId: string, calls: ReadonlyMap<string, number>, deadline: number): Promise<void>;
  /**
   * Records the run's end with its last attempt's provider calls; resolves to its calls over all
   * its attempts, or undefined when this admission's end was recorded before (a redelivery) or
   * cannot be read. A DLQ replay (a new `admittedAt`) ends anew, with the calls made since.
   */
  end(run: Pick<RunRequested, 'runId' | 'admittedAt' | 'deadline'>, calls: ReadonlyMap<string, number>): Promise<ReadonlyMap<string, number> | undefined>;
}

/** Outputs outlive the deadline by this much: a retry can never start later than that. */
const KEEP_AFTER_DEADLINE_MS = 3_600_000;
/** A check alone sits between steps of a live run: it must never hold the run up for long. */
const DEFAULT_CHECK_TIMEOUT_MS = 250;

/** How long a run's outputs are kept from `now`: until an hour after its deadline, at least a second. */
export function keepStepsMs(deadline: number, now: number): number {
  return Math.max(1_000, deadline - now + KEEP_AFTER_DEADLINE_MS);
}

const FIRST_ANSWER_POLL_MS = 10;
const MAX_ANSWER_POLL_MS = 250;

/**
 * The wait before reading a pending answer again, after `polls` reads found it pending. Short at
 * first: usually the 202 is being written as the processor reads (both follow Kafka's
 * acknowledgement). Longer once Kafka is slow to acknowledge, when the answer takes up to the
 * produce timeout.
 */
export function answerPollDelayMs(polls: number): number {
  return Math.min(MAX_ANSWER_POLL_MS, FIRST_ANSWER_POLL_MS * 2 ** Math.min(polls, 10));
}

/**
 * run-progress-open.lua's reply: the cancellation, whether the answer is pending, then step id and
 * output JSON pairs. An output that is not JSON is left out (`unreadable`), so its step is called again.
 */
export function parseRunStart(reply: readonly string[]): RunStart & { answerPending: boolean; unreadable: string[] } {
  const done = new Map<string, unknown>();
  const unreadable: string[] = [];
  for (let i = 2; i + 1 < reply.length; i += 2) {
    const stepId = reply[i]!;
    try {
      done.set(stepId, JSON.parse(reply[i + 1]!) as unknown);
    } catch {
      unreadable.push(stepId);
    }
  }
  return { done, cancelled: cancelReasonOf(reply[0] ?? null), answerPending: reply[1] === '1', unreadable };
}

/** A run's calls as run-progress-calls.lua and run-progress-end.lua take them: dependency and count pairs. */
export function callArgs(calls: ReadonlyMap<string, number>): string[] {
  return [...calls].flatMap(([dependency, n]) => [dependency, String(n)]);
}

/** run-progress-end.lua's reply: the run's calls when this was its first end, else undefined. */
export function parseRunEnd(reply: readonly string[]): ReadonlyMap<string, number> | undefined {
  if (reply[0] !== '1') return undefined;
  const calls = new Map<string, number>();
  for (let i = 1; i + 1 < reply.length; i += 2) calls.set(reply[i]!, Number(reply[i + 1]));
  return calls;
}

export interface RedisRunProgressOptions {
  /** `kafka.produceTimeoutMs`: what bounds a submission's pending answer, and so the wait for it. */
  produceTimeoutMs: number;
  checkTimeoutMs?: number;
  now?: () => number;
  sleep?: (ms: number) => Promise<void>;
}

/**
 * A run's progress in Redis: one hash of step outputs per run, in the run's slot with its
 * cancellation key, so the scripts that read both touch one cluster slot. A Redis outage must not
 * stop work: what cannot be read counts as not done and not cancelled, and a step that cannot be
 * recorded is called again by a redelivery, protected by its Idempotency-Key.
 */
export class RedisRunProgress implements RunProgress {
  private readonly checkTimeoutMs: number;
  private readonly maxAnswerWaitMs: number;
  private readonly now: () => number;
  private readonly sleep: (ms: number) => Promise<void>;

  constructor(
    private readonly redis: RedisClient,
    private readonly scripts: LuaScripts,
    private readonly keys: RedisKeys,
    private readonly logger: Logger,
    opts: RedisRunProgressOptions,
  ) {
    this.checkTimeoutMs = opts.checkTimeoutMs ?? DEFAULT_CHECK_TIMEOUT_MS;
    this.maxAnswerWaitMs = answerPendingMs(opts.produceTimeoutMs);
    this.now = opts.now ?? Date.now;
    this.sleep = opts.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
  }

  /**
   * Waits while the run's submission is unanswered (its mark expires within `answerPendingMs`; the
   * wait is bounded by it here too, should the mark outlive it).
   */
  async open(runId: string): Promise<RunStart> {
    const startedAt = this.now();
    const waitUntil = startedAt + this.maxAnswerWaitMs;
    for (let polls = 0; ; polls++) {
      let start: ReturnType<typeof parseRunStart>;
      try {
        start = parseRunStart((await this.scripts.run('runProgressOpen', [...this.runKeys(runId), this.keys.answerPending(runId)], [])) as string[]);
      } catch (err) {
        this.logger.warn({ err, runId }, "could not read the run's progress; calling its steps again, taking it as not cancelled");
        return { done: new Map(), cancelled: undefined };
      }
      const { done, cancelled, answerPending, unreadable } = start;
      if (answerPending && !cancelled && this.now() < waitUntil) {
        await this.sleep(answerPollDelayMs(polls));
        continue;
      }
      if (answerPending && !cancelled) this.logger.warn({ runId, waitedMs: this.maxAnswerWaitMs }, "the run's submission is still unanswered past the produce timeout; starting it");
      // Rare (Kafka acknowledging late) and the case this wait exists for: worth a line.
      if (polls > 0 && cancelled === 'not_acknowledged') this.logger.info({ runId, waitedMs: this.now() - startedAt }, "the run's submission was answered 503 while the run waited for the answer; it does not run");
      if (unreadable.length > 0) this.logger.warn({ runId, steps: unreadable }, 'recorded step outputs are not JSON; calling those steps again');
      return { done, cancelled };
    }
  }

  async record(runId: string, stepId: string, output: unknown, deadline: number): Promise<CancelReason | undefined> {
    try {
      const reason = (await this.scripts.run('runProgressRecord', this.runKeys(runId), [stepId, JSON.stringify(output ?? null), keepStepsMs(deadline, this.now())])) as string;
      return cancelReasonOf(reason);
    } catch (err) {
      this.logger.warn({ err, runId, stepId }, 'could not record a completed step (a redelivery would call it again) nor check for a cancellation; the run goes on');
      return undefined;
    }
  }

  async cancelReason(runId: string): Promise<CancelReason | undefined> {
    try {
      return cancelReasonOf(await withTimeout(this.redis.get(this.keys.cancelRequested(runId)), this.checkTimeoutMs, 'cancellation check'));
    } catch (err) {
      this.logger.warn({ err, runId }, 'could not check for a cancellation request; the run goes on');
      return undefined;
    }
  }

  async addCalls(runId: string, calls: ReadonlyMap<string, number>, deadline: number): Promise<void> {
    if (calls.size === 0) return;
    try {
      await this.scripts.run('runProgressCalls', [this.keys.runCalls(runId)], [keepStepsMs(deadline, this.now()), ...callArgs(calls)]);
    } catch (err) {
      this.logger.warn({ err, runId }, "could not add an attempt's provider calls to the run's; if it ends without an answer they are not counted as wasted");
    }
  }

  async end(run: Pick<RunRequested, 'runId' | 'admittedAt' | 'deadline'>, calls: ReadonlyMap<string, number>): Promise<ReadonlyMap<string, number> | undefined> {
    try {
      return parseRunEnd((await this.scripts.run('runProgressEnd', [this.keys.runCalls(run.runId)], [keepStepsMs(run.deadline, this.now()), run.admittedAt, ...callArgs(calls)])) as string[]);
    } catch (err) {
      this.logger.warn({ err, runId: run.runId }, "could not record the run's end; it is left out of the goodput and wasted-call counts");
      return undefined;
    }
  }

  private runKeys(runId: string): string[] {
    return [this.keys.runSteps(runId), this.keys.cancelRequested(runId)];
  }
}

/**
 * The calls part of a run's record in one process's memory, by run-progress-calls.lua's and
 * run-progress-end.lua's rules: for the in-process bench and tests, whose runs never leave it.
 */
export class MemoryRunCalls implements Pick<RunProgress, 'addCalls' | 'end'> {
  private readonly calls = new Map<string, Map<string, number>>();
  private readonly ended = new Map<string, number>();

  async addCalls(runId: string, calls: ReadonlyMap<string, number>): Promise<void> {
    const into = this.calls.get(runId) ?? new Map<string, number>();
    for (const [dependency, n] of calls) into.set(dependency, (into.get(dependency) ?? 0) + n);
    this.calls.set(runId, into);
  }

  async end(run: Pick<RunRequested, 'runId' | 'admittedAt'>, calls: ReadonlyMap<string, number>): Promise<ReadonlyMap<string, number> | undefined> {
    if (this.ended.get(run.runId) === run.admittedAt) return undefined;
    await this.addCalls(run.runId, calls);
    const all = this.calls.get(run.runId) ?? new Map<string, number>();
    this.calls.delete(run.runId);
    this.ended.set(run.runId, run.admittedAt);
    return all;
  }
}
