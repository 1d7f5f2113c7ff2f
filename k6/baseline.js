// Open-loop baseline for POST /v1/runs: requests arrive at a fixed rate whatever the latency, so a
// slow Sluice shows up as growing latency and dropped iterations instead of a politely slower
// client (closed-loop tests hide overload). Run: k6 run k6/baseline.js
//   BASE_URL (default http://127.0.0.1:8080), API_KEY (default local-key-a), RATE per second
//   (default 50), DURATION (default 1m), WORKFLOW (default support-reply).
import http from 'k6/http';
import { check } from 'k6';

const BASE_URL = __ENV.BASE_URL || 'http://127.0.0.1:8080';
const API_KEY = __ENV.API_KEY || 'local-key-a';
const WORKFLOW = __ENV.WORKFLOW || 'support-reply';
const RATE = Number(__ENV.RATE || 50);

export const options = {
  scenarios: {
    submit: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: __ENV.DURATION || '1m',
      preAllocatedVUs: Math.max(10, RATE),
      maxVUs: Math.max(50, RATE * 4),
    },
  },
  thresholds: {
    // Refusals (429/503) are honest answers, not failures; anything else is.
    'checks{kind:contract}': ['rate>0.99'],
    'http_req_duration{expected_response:true}': ['p(99)<250'],
  },
};

const ACCEPTED = { 202: 'accepted', 429: 'deferred', 503: 'refused' };

export default function () {
  const res = http.post(
    `${BASE_URL}/v1/runs`,
    JSON.stringify({ workflow: WORKFLOW, input: { message: 'Where is order 42?', orderId: '42' } }),
    {
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${API_KEY}` },
      responseCallback: http.expectedStatuses(202),
    },
  );
  check(
    res,
    {
      'answer follows the overload contract': (r) => r.status in ACCEPTED,
      'refusals say when to come back': (r) => r.status === 202 || r.headers['Retry-After'] !== undefined,
    },
    { kind: 'contract' },
  );
}
