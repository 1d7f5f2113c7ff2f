/** A test-side reader of the SSE wire format: just enough of the WHATWG parsing rules for Sluice's streams. */
export interface SseFrame {
  id?: string;
  event?: string;
  data?: string;
  comments: string[];
}

/** Splits complete frames off `buffer`; returns them and the unfinished rest. */
export function takeSseFrames(buffer: string): { frames: SseFrame[]; rest: string } {
  const normalised = buffer.replace(/\r\n|\r/g, '\n');
  const blocks = normalised.split('\n\n');
  const rest = blocks.pop() ?? '';
  const frames = blocks.map((block) => {
    const frame: SseFrame = { comments: [] };
    const data: string[] = [];
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) {
        frame.comments.push(line.slice(1).trim());
        continue;
      }
      const colon = line.indexOf(':');
      const field = colon === -1 ? line : line.slice(0, colon);
      const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'id') frame.id = value;
      else if (field === 'event') frame.event = value;
      else if (field === 'data') data.push(value);
    }
    if (data.length > 0) frame.data = data.join('\n');
    return frame;
  });
  return { frames, rest };
}

export interface StatusEvent {
  runId: string;
  sequence: number;
  status: string;
  message: string;
  step: string | null;
  attempt: number;
  occurredAt: string;
  result?: unknown;
  error?: unknown;
}

/** The status event a frame carries, or undefined for comments; checks that the frame's id is the sequence. */
export function statusEventOf(frame: SseFrame): StatusEvent | undefined {
  if (frame.event !== 'status') return undefined;
  const e = JSON.parse(frame.data!) as StatusEvent;
  if (frame.id !== String(e.sequence)) throw new Error(`frame id ${frame.id} is not the event's sequence ${e.sequence}`);
  return e;
}

/** The status events of a complete stream body. */
export function statusEventsOf(body: string): StatusEvent[] {
  return takeSseFrames(body).frames.flatMap((f) => statusEventOf(f) ?? []);
}

export interface StreamRead {
  status: number;
  headers: Headers;
  events: StatusEvent[];
  /** True when the server ended the stream; false when the reader stopped early. */
  ended: boolean;
}

export interface StreamReadOptions {
  key: string;
  lastEventId?: number;
  /** Looked at after every chunk with the events so far; true drops the connection. */
  stopWhen?: (events: StatusEvent[]) => boolean;
  timeoutMs?: number;
}

/** Reads a run's status stream over HTTP until the server ends it, or until `stopWhen` holds. */
export async function readStatusStream(url: string, opts: StreamReadOptions): Promise<StreamRead> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new Error('the stream did not end in time')), opts.timeoutMs ?? 60_000);
  try {
    const headers: Record<string, string> = { authorization: `Bearer ${opts.key}`, accept: 'text/event-stream' };
    if (opts.lastEventId !== undefined) headers['last-event-id'] = String(opts.lastEventId);
    const res = await fetch(url, { headers, signal: controller.signal });
    const read: StreamRead = { status: res.status, headers: res.headers, events: [], ended: false };
    if (res.status !== 200) {
      await res.body?.cancel();
      return read;
    }
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { ...read, ended: true };
      const taken = takeSseFrames(buffer + decoder.decode(value, { stream: true }));
      buffer = taken.rest;
      read.events.push(...taken.frames.flatMap((f) => statusEventOf(f) ?? []));
      if (opts.stopWhen?.(read.events)) {
        controller.abort();
        return read;
      }
    }
  } finally {
    clearTimeout(timer);
  }
}
