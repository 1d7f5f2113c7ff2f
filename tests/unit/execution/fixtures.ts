import type { RunRequested } from '../../../src/events/schemas.js';

/** The processor's clock in these tests. */
export const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);

/** A first attempt of an interactive support-reply run of tenant-a, admitted a second before NOW. */
export const RUN: RunRequested = {
  runId: '0190f5a2-7c00-7abc-8def-0123456789ab',
  tenantId: 'tenant-a',
  workflow: 'support-reply',
  class: 'interactive',
  admittedAt: NOW - 1_000,
  deadline: NOW + 30_000,
  attempt: 1,
  traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
  input: '{"orderId":"42"}',
  idempotencyKey: null,
  dueAt: null,
};
