/** A workflow step as far as its dependency goes: an LLM step names an LLM dependency, a tool step a tool. */
export type DependencyStep = { kind: 'llm'; dependency: string } | { kind: 'tool'; tool: string };

/** The dependency a step calls. */
export function dependencyOf(step: DependencyStep): string {
  return step.kind === 'llm' ? step.dependency : step.tool;
}

/** Dependencies a workflow's steps call, each once, in step order. */
export function dependenciesOf(steps: readonly DependencyStep[]): string[] {
  return [...new Set(steps.map(dependencyOf))];
}
