/** A wait that ran out; callers tell it from other failures with `instanceof`. */
export class TimeoutError extends Error {
  override readonly name = 'TimeoutError';
}

/** Rejects after `ms` so that a client library that ignores its own timeouts cannot hang us. */
export async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(`${what} timed out after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
