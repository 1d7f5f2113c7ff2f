/**
 * Tasks that share a key run one after another, in the order they were given; tasks of different
 * keys run at once. A task runs after the one ahead of it settled, whether that succeeded or
 * failed. Holds one entry per key with a task pending or running.
 */
export class KeyTurns {
  /** Per key, the last task given, settled without a failure so that a later task can wait on it. */
  private readonly last = new Map<string, Promise<void>>();

  run<T>(key: string, task: () => Promise<T>): Promise<T> {
    const ahead = this.last.get(key) ?? Promise.resolve();
    const turn = ahead.then(task);
    const settled = turn.then(
      () => undefined,
      () => undefined,
    );
    this.last.set(key, settled);
    void settled.then(() => {
      if (this.last.get(key) === settled) this.last.delete(key);
    });
    return turn;
  }

  /** Keys with a task pending or running. */
  get size(): number {
    return this.last.size;
  }
}
