/**
 * The user turn of an LLM step: the caller's request, then each earlier step's output in order,
 * labelled by step id, so the model sees facts from tools verbatim instead of a nested JSON blob.
 */
export function composeUserTurn(input: unknown, earlier: Readonly<Record<string, unknown>>): string {
  const parts = [`Request:\n${typeof input === 'string' ? input : JSON.stringify(input)}`];
  const steps = Object.entries(earlier);
  if (steps.length > 0) {
    const lines = steps.map(([id, out]) => {
      const text = out && typeof out === 'object' && 'text' in out && typeof out.text === 'string' ? out.text : JSON.stringify(out);
      return `[${id}] ${text}`;
    });
    parts.push(`Earlier steps:\n${lines.join('\n')}`);
  }
  return parts.join('\n\n');
}
