/** A workflow step as far as its dependencies go: an LLM step names an LLM dependency, a tool step a tool, an agent its model and its tools. */
export type DependencyStep = { kind: 'llm'; dependency: string } | { kind: 'tool'; tool: string } | { kind: 'agent'; dependency: string; tools: readonly string[] };

/** The dependency a step calls first: a tool step's tool, an LLM step's or an agent's model. */
export function dependencyOf(step: DependencyStep): string {
  return step.kind === 'tool' ? step.tool : step.dependency;
}

/** Every dependency a step may call: an agent's model and its tools, else the one dependency. */
export function stepDependencies(step: DependencyStep): readonly string[] {
  return step.kind === 'agent' ? [step.dependency, ...step.tools] : [dependencyOf(step)];
}

/** Dependencies a workflow's steps may call, each once, in step order. */
export function dependenciesOf(steps: readonly DependencyStep[]): string[] {
  return [...new Set(steps.flatMap(stepDependencies))];
}

/**
 * Permit leases one run may hold at once: its run lease, and one per dependency call in flight,
 * which is one for `llm` and `tool` steps and up to `maxParallelTools` for an agent's tool calls.
 */
export function leasesPerRun(workflows: Readonly<Record<string, { steps: readonly ({ kind: string } & { bounds?: { maxParallelTools: number } })[] }>>): number {
  let calls = 1;
  for (const wf of Object.values(workflows)) for (const step of wf.steps) if (step.kind === 'agent' && step.bounds) calls = Math.max(calls, step.bounds.maxParallelTools);
  return 1 + calls;
}
