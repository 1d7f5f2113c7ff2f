import { parser } from '@prometheus-io/lezer-promql';

type SyntaxNode = ReturnType<typeof parser.parse>['topNode'];

/** One series selector of a query: the metric it names and the labels it matches on. */
export interface Selector {
  metric: string | undefined;
  labels: string[];
}

export interface ParsedQuery {
  selectors: Selector[];
  /** Where the parser gave up, as `offset: text around it`. */
  errors: string[];
}

/**
 * Grafana's interval variables stand where PromQL wants a duration; any sensible one parses the
 * same. Other variables (`$tenant`) only appear inside label-matcher strings.
 */
const GRAFANA_INTERVALS = /\$(?:__(?:rate_interval|interval|range)\b|\{__(?:rate_interval|interval|range)\})/g;

const children = (node: SyntaxNode, name: string): SyntaxNode[] => {
  const found: SyntaxNode[] = [];
  for (let c = node.firstChild; c; c = c.nextSibling) if (c.name === name) found.push(c);
  return found;
};

/** The metric names and label matchers of every selector in `expr`, and any syntax errors. */
export function parsePromql(query: string): ParsedQuery {
  const expr = query.replace(GRAFANA_INTERVALS, '5m');
  const text = (n: SyntaxNode) => expr.slice(n.from, n.to);
  const unquote = (s: string) => JSON.parse(s.startsWith("'") ? `"${s.slice(1, -1)}"` : s) as string;
  const selectors: Selector[] = [];
  const errors: string[] = [];
  parser.parse(expr).iterate({
    enter: (ref) => {
      if (ref.type.isError) errors.push(`${ref.from}: …${expr.slice(Math.max(0, ref.from - 20), ref.from + 20)}…`);
      if (ref.name !== 'VectorSelector') return;
      const node = ref.node;
      const labels: string[] = [];
      let metric = children(node, 'Identifier').map(text)[0];
      for (const list of children(node, 'LabelMatchers')) {
        for (const matcher of [...children(list, 'UnquotedLabelMatcher'), ...children(list, 'QuotedLabelMatcher')]) {
          const name = children(matcher, 'LabelName').map(text)[0] ?? children(matcher, 'QuotedLabelName').map((n) => unquote(text(n)))[0];
          const value = children(matcher, 'StringLiteral').map((n) => unquote(text(n)))[0];
          if (name === '__name__' && children(matcher, 'MatchOp')[0]?.firstChild?.name === 'EqlSingle') metric = value;
          else if (name !== undefined) labels.push(name);
        }
        // `{"metric_name", label="…"}`: a bare quoted name is the metric.
        for (const quoted of children(list, 'QuotedLabelName')) metric = unquote(text(quoted));
      }
      selectors.push({ metric, labels });
    },
  });
  return { selectors, errors };
}

/**
 * What is wrong with `expr` against the series Sluice exports (`exported`: name → labels) and the
 * recording rules (whose labels are not checked): syntax errors, selectors without a metric
 * name, unknown metrics, and label matchers on labels a metric does not carry.
 */
export function promqlProblems(expr: string, exported: Map<string, Set<string>>, recorded: Set<string>): string[] {
  const { selectors, errors } = parsePromql(expr);
  const problems = errors.map((e) => `syntax error at ${e}`);
  for (const { metric, labels } of selectors) {
    if (metric === undefined) problems.push('a selector without a metric name');
    else if (recorded.has(metric)) continue;
    else if (!exported.has(metric)) problems.push(`${metric} is not a metric Sluice exports`);
    else for (const l of labels) if (!exported.get(metric)!.has(l)) problems.push(`${metric} has no label ${l}`);
  }
  return problems;
}
