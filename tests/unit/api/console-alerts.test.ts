import { describe, expect, it } from 'vitest';
import { advanceAlerts, alertConditions, backlogUse, lagGrowth, type AlertClock, type AlertInputs } from '../../../src/api/console/alerts.js';
import type { Tally } from '../../../src/api/console/overview.js';
import type { LagReport } from '../../../src/lag/lag-report.js';

const empty = (at: number): Tally => ({ at, admission: {}, refusals: {}, deadLetters: {}, leasesLost: 0, retryBudgetExhausted: {}, wasted: {}, turns: {} });
const lag = (groups: LagReport['groups']): LagReport => ({ at: 0, windowMs: 60_000, samples: 5, groups });
const partition = (topic: string, lagSeconds: number, lagMessages = '5') => ({ topic, partition: 0, committed: '1', low: '0', high: '6', lagMessages, lagSeconds, timeSource: 'record' as const, status: 'OK' as const });
const calmBacklog = { tenants: [], global: { runs: 0, limit: 100 } };
const inputs = (o: Partial<AlertInputs>): AlertInputs => ({ lag: lag([]), lagHistory: [], backlog: calmBacklog, breakers: [], tallies: [], ...o });
const names = (o: Partial<AlertInputs>, now = 0) => alertConditions(inputs(o), now).held.map((h) => h.alert);

describe('alertConditions', () => {
  it("holds the alert rules' thresholds: interactive lag over 10 s, per group and topic", () => {
    const report = lag([{ group: 'ns.sluice.processor', members: 1, status: 'OK', lagMessages: '5', maxLagSeconds: 12, partitions: [partition('ns.sluice.runs.interactive', 12)] }]);
    expect(alertConditions(inputs({ lag: report }), 0).held).toEqual([
      { alert: 'SluiceInteractiveLagHigh', severity: 'critical', summary: 'Interactive runs wait 12 s in Kafka before a processor reads them', subject: 'ns.sluice.processor/ns.sluice.runs.interactive' },
    ]);
    const calm = lag([{ group: 'ns.sluice.processor', members: 1, status: 'OK', lagMessages: '5', maxLagSeconds: 10, partitions: [partition('ns.sluice.runs.interactive', 10)] }]);
    expect(names({ lag: calm })).toEqual([]);
  });

  it('flags an empty group with lag, no processors, and no lag monitor at all', () => {
    const report = lag([
      { group: 'sluice.status-sink', members: 0, status: 'OK', lagMessages: '7', maxLagSeconds: 1, partitions: [partition('sluice.runs.status', 1, '7')] },
      { group: 'sluice.processor', members: 0, status: 'OK', lagMessages: '0', maxLagSeconds: 0, partitions: [] },
    ]);
    expect(names({ lag: report })).toEqual(['SluiceConsumerGroupEmpty', 'SluiceNoProcessors']);
    expect(names({ lag: undefined })).toEqual(['SluiceLagMonitorAbsent']);
  });

  it('calls a group stalled only while its lag grew over the last 10 minutes, and never the retry forwarder', () => {
    const report = lag([
      { group: 'sluice.processor', members: 1, status: 'STALL', lagMessages: '9', maxLagSeconds: 1, partitions: [] },
      { group: 'sluice.retry-forwarder', members: 1, status: 'STOP', lagMessages: '9', maxLagSeconds: 1, partitions: [] },
    ]);
    const grew = [{ at: 600_000, lag: { 'sluice.processor': 3, 'sluice.retry-forwarder': 3 } }, { at: 1_000_000, lag: { 'sluice.processor': 9, 'sluice.retry-forwarder': 9 } }];
    expect(names({ lag: report, lagHistory: grew }, 1_000_000)).toEqual(['SluiceConsumerGroupStalled']);
    const flat = [{ at: 600_000, lag: { 'sluice.processor': 9 } }, { at: 1_000_000, lag: { 'sluice.processor': 9 } }];
    expect(names({ lag: report, lagHistory: flat }, 1_000_000)).toEqual([]);
    // Growth before the window does not count.
    expect(lagGrowth([{ at: 0, lag: { g: 1 } }, { at: 399_999, lag: { g: 5 } }, { at: 1_000_000, lag: { g: 5 } }], 'g', 1_000_000, 600_000)).toBe(0);
  });

  it('computes refusal shares over five minutes, only above 0.2 submissions per second', () => {
    const busy = [empty(0), { ...empty(300_000), admission: { admitted: 80, deferred: 15, rejected: 5 } }];
    expect(names({ tallies: busy })).toEqual(['SluiceAdmissionRefusing']);
    const rejecting = [empty(0), { ...empty(300_000), admission: { admitted: 80, rejected: 20 } }];
    expect(names({ tallies: rejecting })).toEqual(['SluiceAdmissionRefusing', 'SluiceAdmissionRejecting']);
    const quiet: Tally[] = [{ ...empty(0), admission: { rejected: 50 } }, { ...empty(300_000), admission: { admitted: 10, rejected: 50 } }];
    expect(names({ tallies: quiet })).toEqual([]);
  });

  it('flags a tenant over 80 % of its backlog bound and the global backlog over 80 % of its', () => {
    const use = backlogUse(
      [
        { tenant: 'a', runClass: 'interactive', runs: 5, oldestAdmittedAt: 1 },
        { tenant: 'a', runClass: 'batch', runs: 4, oldestAdmittedAt: 1 },
        { tenant: 'b', runClass: 'batch', runs: 8, oldestAdmittedAt: 1 },
      ],
      { tenants: { a: 10, b: 10, c: 10 }, global: 20 },
    );
    expect(use).toEqual({ tenants: [{ tenant: 'a', runs: 9, limit: 10 }, { tenant: 'b', runs: 8, limit: 10 }, { tenant: 'c', runs: 0, limit: 10 }], global: { runs: 17, limit: 20 } });
    expect(alertConditions(inputs({ backlog: use }), 0).held.map((h) => [h.alert, h.subject])).toEqual([
      ['SluiceTenantBacklogNearBound', 'a'],
      ['SluiceBacklogNearGlobalBound', ''],
    ]);
  });

  it('takes breakers that are not closed, leases lost, spent retry budgets and growing dead letters', () => {
    const tallies = [empty(0), { ...empty(900_000), deadLetters: { expired: 11, decode_error: 10 }, leasesLost: 1, retryBudgetExhausted: { anthropic: 1 } }];
    const held = alertConditions(inputs({ tallies, breakers: [{ name: 'anthropic', state: 'half_open' }, { name: 'search', state: 'closed' }] }), 0).held;
    expect(held.map((h) => [h.alert, h.subject])).toEqual([
      ['SluiceBreakerOpen', 'anthropic'],
      ['SluicePermitLeaseLost', ''],
      ['SluiceRetryBudgetExhausted', 'anthropic'],
      ['SluiceDeadLettersGrowing', 'expired'],
    ]);
  });

  it('leaves the rules whose input could not be read unevaluated', () => {
    const { held, unevaluated } = alertConditions(inputs({ lag: 'unreadable', backlog: 'unreadable' }), 0);
    expect(held).toEqual([]);
    expect(unevaluated).toContain('SluiceLagMonitorAbsent');
    expect(unevaluated).toContain('SluiceTenantBacklogNearBound');
    expect(unevaluated).not.toContain('SluiceBreakerOpen');
  });
});

describe('advanceAlerts', () => {
  const open = { alert: 'SluiceBreakerOpen' as const, severity: 'critical' as const, summary: 'Breaker of x is open', subject: 'x' };
  const rewound = { alert: 'SluiceConsumerGroupRewound' as const, severity: 'info' as const, summary: 'rewound', subject: 'g' };
  const none = new Set<never>();

  it("fires a condition once it held for its rule's for: duration (5 min for a breaker), and at once for a rule without one", () => {
    let state = advanceAlerts(new Map(), { held: [open, rewound], unevaluated: none }, 0);
    expect(state.firing.map((a) => a.alert)).toEqual(['SluiceConsumerGroupRewound']);
    expect(state.pending).toEqual([{ alert: 'SluiceBreakerOpen', severity: 'critical', summary: 'Breaker of x is open', since: 0, forMs: 300_000 }]);
    state = advanceAlerts(state.clock, { held: [open], unevaluated: none }, 299_999);
    expect(state.firing).toEqual([]);
    state = advanceAlerts(state.clock, { held: [open], unevaluated: none }, 300_000);
    expect(state.firing).toEqual([{ alert: 'SluiceBreakerOpen', severity: 'critical', summary: 'Breaker of x is open' }]);
    expect(state.pending).toEqual([]);
  });

  it('starts the wait again when a condition stopped holding in between', () => {
    let state = advanceAlerts(new Map(), { held: [open], unevaluated: none }, 0);
    state = advanceAlerts(state.clock, { held: [], unevaluated: none }, 200_000);
    expect(state.clock.size).toBe(0);
    state = advanceAlerts(state.clock, { held: [open], unevaluated: none }, 250_000);
    state = advanceAlerts(state.clock, { held: [open], unevaluated: none }, 500_000);
    expect(state.firing).toEqual([]);
    expect(state.pending[0]?.since).toBe(250_000);
  });

  it('keeps an unevaluated rule as it was: neither forgotten nor restarted', () => {
    const clock: AlertClock = new Map([['SluiceBreakerOpen/x', { since: 0, condition: open }]]);
    const state = advanceAlerts(clock, { held: [], unevaluated: new Set(['SluiceBreakerOpen']) }, 400_000);
    expect(state.firing.map((a) => a.alert)).toEqual(['SluiceBreakerOpen']);
  });
});
