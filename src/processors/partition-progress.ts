/**
 * Offsets of one partition that were read ahead and are not finished yet. Records finish out of
 * order (a quick run overtakes a slow one), but Kafka can only store one position per partition,
 * so the committable position is the lowest unfinished offset: committing past it would lose the
 * slow run if this instance died.
 */
export class PartitionProgress {
  private readonly unfinished = new Set<number>();
  private highestSeen = -1;
  private lastCommitted: number | undefined;

  /** True for a record tracked before: kafkajs re-fetches from the committed offset after a rebalance. */
  seen(offset: number): boolean {
    return offset <= this.highestSeen;
  }

  /** `duplicate` for a record seen before: kafkajs re-fetches from the committed offset after a rebalance. */
  track(offset: number): 'new' | 'duplicate' {
    if (!Number.isSafeInteger(offset) || offset < 0) throw new RangeError(`invalid offset ${offset}`);
    if (offset <= this.highestSeen) return 'duplicate';
    this.highestSeen = offset;
    this.unfinished.add(offset);
    return 'new';
  }

  finish(offset: number): void {
    this.unfinished.delete(offset);
  }

  get inFlight(): number {
    return this.unfinished.size;
  }

  /** The next offset to consume after a restart: the lowest unfinished one, else one past the highest seen. */
  position(): number | undefined {
    if (this.highestSeen < 0) return undefined;
    let lowest = this.highestSeen + 1;
    for (const o of this.unfinished) if (o < lowest) lowest = o;
    return lowest;
  }

  /** The position to commit now, or undefined when it has not moved since the last commit. */
  committable(): number | undefined {
    const p = this.position();
    return p !== undefined && p !== this.lastCommitted ? p : undefined;
  }

  markCommitted(position: number): void {
    if (this.lastCommitted === undefined || position > this.lastCommitted) this.lastCommitted = position;
  }
}
