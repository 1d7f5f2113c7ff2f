-- One dependency's retry budget, shared by every processor: adds the calls a processor made since
-- its last report, then, when asked, takes one retry if retries stay within `ratio` of the calls
-- in the sliding window (or within the floor `min_retries`), atomically.
-- Time comes from the Redis server (TIME), so processors with skewed clocks share one window.
-- KEYS[1]  window hash: `c:<bucket>` → calls, `r:<bucket>` → retries
-- ARGV[1]  calls to add   ARGV[2] take a retry (1|0)   ARGV[3] ratio (may be fractional)
-- ARGV[4]  window ms      ARGV[5] buckets per window   ARGV[6] min retries per window
-- Returns  {allowed (1|0; 0 when not asked), calls in the window, retries in the window}
local add_calls = tonumber(ARGV[1])
local take = tonumber(ARGV[2]) == 1
local ratio = tonumber(ARGV[3])
local window_ms = tonumber(ARGV[4])
local buckets = tonumber(ARGV[5])
local min_retries = tonumber(ARGV[6])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local bucket_ms = window_ms / buckets
local current = math.floor(now / bucket_ms)
local oldest = current - buckets + 1

local calls = 0
local retries = 0
local fields = redis.call('HGETALL', KEYS[1])
local stale = {}
for i = 1, #fields, 2 do
  local kind, b = string.match(fields[i], '^(%a):(%-?%d+)$')
  b = tonumber(b)
  -- A bucket ahead of `current` is kept: the server clock stepped back, and it is still recent.
  if b == nil or b < oldest then
    stale[#stale + 1] = fields[i]
  elseif kind == 'c' then
    calls = calls + tonumber(fields[i + 1])
  elseif kind == 'r' then
    retries = retries + tonumber(fields[i + 1])
  end
end
if #stale > 0 then redis.call('HDEL', KEYS[1], unpack(stale)) end

if add_calls > 0 then
  redis.call('HINCRBY', KEYS[1], 'c:' .. current, add_calls)
  calls = calls + add_calls
end

local allowed = 0
if take and retries + 1 <= math.max(ratio * calls, min_retries) then
  redis.call('HINCRBY', KEYS[1], 'r:' .. current, 1)
  retries = retries + 1
  allowed = 1
end

if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], math.ceil(window_ms + bucket_ms))
end
return {allowed, calls, retries}
