/** Sluice's client library: the package's only entry point. */
export { SluiceClient, type CallOptions, type EventsOptions, type SluiceClientOptions, type SubmitRequest, type WaitOptions } from './sluice-client.js';
export { ResponseTooLargeError, SluiceHttpError, SluiceRefusal, SseEventTooLargeError } from './errors.js';
export type { Reconnect, SubmitRetry } from './retry-policy.js';
export { TERMINAL_RUN_STATUSES, type CancelRequested, type FieldError, type PricedUsage, type Run, type RunClass, type RunError, type RunEvent, type RunLinks, type RunStatus, type RunUsage, type SubmittedRun } from './types.js';
