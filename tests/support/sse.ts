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
